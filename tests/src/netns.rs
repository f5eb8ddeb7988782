//! Two network namespaces joined by veth pairs, made by the test itself
//! and removed when dropped, so that a job can span two "hosts" on one
//! machine without touching the machine's own network; each pair may be
//! rate-limited with `tc`, as two links of a multi-rail node.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces `<prefix>0` and `<prefix>1`, with `10.<net>.<k>.1/24` and
/// `10.<net>.<k>.2/24` on the two ends of veth pair `k`.
#[derive(Debug)]
pub struct VethPair {
    prefix: String,
    created: Vec<String>,
    net: u32,
    id: u32,
    pairs: usize,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The name of namespace `node`'s (0 or 1) end of pair `k` in set `id`.
fn device(id: u32, node: usize, k: usize) -> String {
    let side = if node == 0 { 'a' } else { 'b' };
    format!("fo{id}{side}{k}")
}

/// Runs `tc` inside namespace `ns`.
fn tc(ns: &str, args: &[&str]) -> Result<(), String> {
    let mut full = vec!["netns", "exec", ns, "tc"];
    full.extend_from_slice(args);
    ip(&full)
}

impl VethPair {
    /// Creates the namespaces joined by one pair. An error (no `ip`, no
    /// privilege, no namespace support) means the caller should skip and
    /// say why.
    pub fn create() -> Result<Self, String> {
        Self::create_with(1, None)
    }

    /// Creates the namespaces joined by `pairs` veth pairs, each end
    /// limited to `rate_mbit` megabits per second when given (a token
    /// bucket on the sending side of both ends).
    pub fn create_with(pairs: usize, rate_mbit: Option<u32>) -> Result<Self, String> {
        // Interface names are limited to 15 bytes. Tests of one binary
        // run at once: each set gets its own names.
        static SETS: AtomicU32 = AtomicU32::new(0);
        let set = SETS.fetch_add(1, Ordering::Relaxed) % 10;
        let id = (std::process::id() % 10_000) * 10 + set;
        let prefix = format!("fo{id}n");
        let net = 100 + (id % 100);
        let mut pair = Self {
            prefix: prefix.clone(),
            created: Vec::new(),
            net,
            id,
            pairs,
        };
        for i in 0..2 {
            let ns = format!("{prefix}{i}");
            ip(&["netns", "add", &ns])?;
            pair.created.push(ns);
        }
        let (ns0, ns1) = (format!("{prefix}0"), format!("{prefix}1"));
        for ns in [&ns0, &ns1] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for k in 0..pairs {
            let (a, b) = (device(id, 0, k), device(id, 1, k));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &ns0])?;
            ip(&["link", "set", &b, "netns", &ns1])?;
            for (ns, dev, host) in [(&ns0, &a, 1), (&ns1, &b, 2)] {
                let addr = format!("10.{net}.{k}.{host}/24");
                ip(&["-n", ns, "addr", "add", &addr, "dev", dev])?;
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                if let Some(rate) = rate_mbit {
                    let rate = format!("{rate}mbit");
                    tc(
                        ns,
                        &[
                            "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                            "256kb", "latency", "100ms",
                        ],
                    )?;
                }
            }
        }
        Ok(pair)
    }

    /// The subnet of pair `k`, as `btl_tcp_if_include` takes it.
    pub fn subnet(&self, k: usize) -> String {
        format!("10.{}.{k}.0/24", self.net)
    }

    /// How many pairs join the namespaces.
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// Namespace names are this prefix followed by 0 or 1.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Bytes sent so far by namespace `node`'s (0 or 1) end of pair `k`,
    /// from the interface's counters, read inside the namespace.
    pub fn tx_bytes(&self, node: usize, k: usize) -> Result<u64, String> {
        let ns = format!("{}{node}", self.prefix);
        let counter = format!(
            "/sys/class/net/{}/statistics/tx_bytes",
            device(self.id, node, k)
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "cat", &counter])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().parse().map_err(|_| {
            format!(
                "{counter} in {ns}: {:?} {}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it
        // the other end.
        for ns in &self.created {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
