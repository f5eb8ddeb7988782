//! Two network namespaces joined by a veth pair, made by the test itself
//! and removed when dropped, so that a job can span two "hosts" on one
//! machine without touching the machine's own network.

use std::process::Command;

/// Namespaces `<prefix>0` and `<prefix>1`, with `10.<net>.0.1/24` and
/// `10.<net>.0.2/24` on the two ends of a veth pair.
#[derive(Debug)]
pub struct VethPair {
    prefix: String,
    created: Vec<String>,
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

impl VethPair {
    /// Creates the pair. An error (no `ip`, no privilege, no namespace
    /// support) means the caller should skip and say why.
    pub fn create() -> Result<Self, String> {
        // Interface names are limited to 15 bytes.
        let id = std::process::id() % 100_000;
        let prefix = format!("fo{id}n");
        let net = 100 + (id % 100);
        let mut pair = Self {
            prefix: prefix.clone(),
            created: Vec::new(),
        };
        for i in 0..2 {
            let ns = format!("{prefix}{i}");
            ip(&["netns", "add", &ns])?;
            pair.created.push(ns);
        }
        let (a, b) = (format!("fo{id}a"), format!("fo{id}b"));
        let (ns0, ns1) = (format!("{prefix}0"), format!("{prefix}1"));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
        ip(&["link", "set", &a, "netns", &ns0])?;
        ip(&["link", "set", &b, "netns", &ns1])?;
        for (ns, dev, host) in [(&ns0, &a, 1), (&ns1, &b, 2)] {
            let addr = format!("10.{net}.0.{host}/24");
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    /// Namespace names are this prefix followed by 0 or 1.
    pub fn prefix(&self) -> &str {
        &self.prefix
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
