//! What a rank has sent leaves before it closes: a message the tcp
//! transport took only in part (its immediate send wrote the start and
//! kept the rest, with no completion to wait for) still counts as unsent
//! in the messenger, and the drain before close writes it. Run as a real
//! job of `drain_peer` (tests/src/bin), which forces the partial write
//! with socket buffers far smaller than the message.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout};

/// Bytes of the message: under the eager limit set below, far over both
/// socket buffers.
const LEN: usize = 200 << 10;

#[test]
fn a_message_a_socket_took_in_part_is_written_before_close() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(host);
    for (var, _) in std::env::vars() {
        if var.starts_with("FIREOPAL_") {
            cmd.env_remove(var);
        }
    }
    cmd.args(["run", "-n", "2"]);
    for p in [
        "btl=self,tcp",
        "btl_tcp_if_include=lo",
        "btl_tcp_links=1",
        "btl_tcp_sndbuf=4096",
        "btl_tcp_rcvbuf=4096",
        "btl_tcp_eager_limit=256K",
        "btl_tcp_max_send_size=256K",
    ] {
        cmd.args(["--param", p]);
    }
    cmd.args(["--", env!("CARGO_BIN_EXE_drain_peer"), &LEN.to_string()]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(180));
    assert!(!out.timed_out, "job timed out:\n{}", out.stderr);
    out.assert_success();
    let held = out
        .stdout
        .lines()
        .find(|l| l.starts_with("rank 0: ticket Done, pending 0, unsent "))
        .unwrap_or_else(|| panic!("no report of rank 0:\n{}", out.stdout));
    assert!(held.ends_with("drained false"), "{held}");
    assert!(
        out.stdout
            .contains(&format!("rank 1: received {LEN} bytes intact")),
        "{}",
        out.stdout
    );
}
