//! Two simulated nodes joined by two rate-limited links: striping a large
//! message over both moves it at close to twice the rate of one.
//!
//! Each rank runs in its own network namespace; the namespaces are joined
//! by two veth pairs, each limited by `tc` to 500 Mbit/s per direction.
//! `fireopal bench pingpong` streams 4 MiB active messages from rank 0 to
//! rank 1 over tcp restricted to one pair's subnet, then to both (two
//! modules per peer: each message striped over them). Skipped, saying
//! why, where namespaces or `tc` are not available.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::netns::VethPair;
use fireopal_tests::{host_binary, run_with_timeout};

const RATE_MBIT: u32 = 500;
const SIZE: usize = 4 << 20;

/// One 4 MiB message's half round trip (µs) and the streaming bandwidth
/// (MB/s) between the two namespaces over the subnets `include`.
fn measure(nodes: &VethPair, include: &str) -> (f64, f64) {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = run_with_timeout(
        Command::new(&host)
            .args(["run", "-n", "2"])
            .args(["--param", &format!("btl_tcp_if_include={include}")])
            .args(["--"])
            .args([
                "sh",
                "-c",
                r#"exec ip netns exec "$FO_NETNS$PMI_RANK" "$0" "$@""#,
            ])
            .arg(&host)
            .args(["bench", "pingpong", "--btl", "tcp,self", "--from", "copy"])
            .args(["--sizes", &SIZE.to_string(), "--quick", "--json"])
            .env("FO_NETNS", nodes.prefix()),
        Duration::from_secs(300),
    );
    assert!(!out.timed_out, "timed out\n{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let number = |key: &str| -> f64 {
        let key = format!("\"{key}\":");
        let at = out
            .stdout
            .find(&key)
            .unwrap_or_else(|| panic!("{}", out.stdout))
            + key.len();
        let rest = &out.stdout[at..];
        let end = rest
            .find(|c: char| c != '.' && !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end]
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
    };
    (number("latency_us"), number("bandwidth_mbs"))
}

#[test]
fn striping_over_two_limited_links_nearly_doubles_the_bandwidth_of_one() {
    let nodes = match VethPair::create_with(2, Some(RATE_MBIT)) {
        Ok(n) => n,
        Err(why) => {
            eprintln!("skipped: cannot create rate-limited network namespaces here: {why}");
            return;
        }
    };
    let one = nodes.subnet(0);
    let both = format!("{},{}", nodes.subnet(0), nodes.subnet(1));
    // Alternate, so that neither configuration always runs first.
    let mut single = Vec::new();
    let mut striped = Vec::new();
    for _ in 0..2 {
        single.push(measure(&nodes, &one));
        striped.push(measure(&nodes, &both));
    }
    let best_bw = |v: &[(f64, f64)]| v.iter().map(|m| m.1).fold(0.0, f64::max);
    let best_lat = |v: &[(f64, f64)]| v.iter().map(|m| m.0).fold(f64::MAX, f64::min);
    let (s, d) = (best_bw(&single), best_bw(&striped));
    let (sl, dl) = (best_lat(&single), best_lat(&striped));
    eprintln!(
        "4 MiB over one {RATE_MBIT} Mbit/s link: {single:?} (us, MB/s); striped over two: \
         {striped:?}; bandwidth {:.2}x, latency {:.2}x",
        d / s,
        dl / sl
    );
    assert!(s > 0.0, "no bandwidth over one link");
    assert!(
        d >= 1.7 * s,
        "striped over two links {d:.1} MB/s, not 1.7 times one link's {s:.1} MB/s"
    );
    // One message alone moves over both links at once: striping, not only
    // messages taking turns.
    assert!(
        dl <= 0.65 * sl,
        "one 4 MiB message took {dl:.0} us over two links against {sl:.0} us over one"
    );
}
