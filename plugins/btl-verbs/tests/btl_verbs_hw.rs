//! The verbs data path on a real device: the transport suite and a
//! ping-pong between two ranks' modules in this process, through the
//! device's port (the two queue pairs of a connection sit on one port,
//! which the hardware loops back).
//!
//! Runs only where `ibv_devinfo` (Debian: `ibverbs-utils`) shows a port in
//! `PORT_ACTIVE`; anywhere else each test prints why it skipped and
//! passes, having moved nothing. A site runs it with
//! `cargo test -p fireopal-btl-verbs --test btl_verbs_hw -- --nocapture`;
//! `FIREOPAL_BTL_VERBS_DEVICE=mlx5_0:1`-style choices go through the
//! `btl_verbs_*` parameters below.

use std::process::Command;
use std::time::Duration;

use fireopal_abi::btl::{Completion, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_btl_verbs::VerbsComponent;
use fireopal_conformance::job::ensure;
use fireopal_conformance::{Failure, Job, Setup};

/// Why the data path cannot be tested here, or `None` if it can.
fn skip_reason() -> Option<String> {
    let out = match Command::new("ibv_devinfo").output() {
        Ok(out) => out,
        Err(e) => {
            return Some(format!(
            "ibv_devinfo cannot run ({e}); install ibverbs-utils on a machine with an RDMA device"
        ))
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("PORT_ACTIVE") {
        return None;
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said
        .lines()
        .chain(text.lines())
        .next()
        .unwrap_or("no output");
    Some(format!("ibv_devinfo shows no port in PORT_ACTIVE ({said})"))
}

/// The setup of both tests: the device the site names, if any.
fn setup() -> Setup {
    let mut s = Setup::ranks(2).stall_limit(Duration::from_secs(120));
    for name in [
        "btl_verbs_device",
        "btl_verbs_gid_index",
        "btl_verbs_library",
    ] {
        let var = format!("FIREOPAL_{}", name.to_uppercase());
        if let Ok(v) = std::env::var(&var) {
            let value = match v.parse::<i64>() {
                Ok(i) if name == "btl_verbs_gid_index" => ParamValue::Int(i),
                _ => ParamValue::Str(v.into()),
            };
            s = s.param(name, value);
        }
    }
    s
}

#[test]
fn transport_suite_over_verbs() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped, nothing sent over verbs: {why}");
        return;
    }
    let setup = setup();
    for (name, _) in fireopal_conformance::transport::cases::<VerbsComponent>() {
        fireopal_conformance::transport::run_case::<VerbsComponent>(name, &setup);
    }
}

fn pingpong(rounds: usize) -> Result<u64, Failure> {
    let mut job = Job::connected::<VerbsComponent>(&setup())?;
    let max = job.procs[0].attributes.max_send_size as usize - 8;
    let sizes = [0usize, 1, 8, 64, 1000, 4096, max];
    let mut moved = 0u64;
    for round in 0..rounds {
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            let len = sizes[round % sizes.len()];
            let payload: Vec<u8> = (0..len).map(|i| (i + round + from) as u8).collect();
            let header = (round as u64).to_le_bytes();
            let cookie = (round * 2 + from) as u64;
            let before = job.procs[to].rec.delivered.len();
            let p = &mut job.procs[from];
            match p
                .module
                .send(to as u32, 7, &header, &payload, cookie)
                .map_err(|e| Failure(format!("send: {e}")))?
            {
                Completion::Done => {}
                Completion::Pending => {
                    job.drive("the send completion", |j| {
                        j.procs[from].rec.send_status(cookie).is_some()
                    })?;
                }
            }
            job.drive("the message", |j| j.procs[to].rec.delivered.len() > before)?;
            let got = &job.procs[to].rec.delivered[before];
            ensure(
                got.peer == from as u32
                    && got.tag == 7
                    && got.header == header
                    && got.payload == payload,
                || format!("round {round}: message {from} -> {to} arrived changed"),
            )?;
            moved += len as u64;
        }
    }
    job.check_clean()?;
    Ok(moved)
}

#[test]
fn pingpong_over_verbs() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped, nothing sent over verbs: {why}");
        return;
    }
    match pingpong(2000) {
        Ok(bytes) => eprintln!("verbs ping-pong: 4000 messages, {bytes} payload bytes, all intact"),
        Err(f) => panic!("verbs ping-pong failed: {f}"),
    }
}
