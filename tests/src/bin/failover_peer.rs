//! A rank of a job that must finish although a transport fails under it,
//! for tests/tests/resilience.rs. Run under `fireopal run`:
//!
//! ```text
//! failover_peer MESSAGES
//! ```
//!
//! Every rank sends MESSAGES numbered messages to every other rank, all
//! before its first `progress`, then progresses until it has received
//! MESSAGES intact from each peer and every send completed. A send that
//! completes with an error because its transport was closed is sent again
//! (the messenger routes it over the next transport); any other error, or
//! a failed peer, ends the rank with exit status 1. Rank 0 prints one line
//! with the counts; each rank names the modules that were closed.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::bootstrap::Bootstrap;
use fireopal::btl::{Messenger, SendError, SendId, SendTicket};
use fireopal::plugin::{Options, Registry};

const TAG: u8 = 7;
/// Only a guard against a hang; the test's outcome never depends on it.
const STALL: Duration = Duration::from_secs(60);

fn payload(from: u32, seq: u32) -> Vec<u8> {
    let len = 16 + (seq as usize % 64) * 37;
    (0..len)
        .map(|i| (i as u32 ^ from.wrapping_mul(31) ^ seq) as u8)
        .collect()
}

fn main() -> ExitCode {
    let messages = match std::env::args().nth(1).map(|a| a.parse::<u32>()) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("usage: failover_peer MESSAGES");
            return ExitCode::from(2);
        }
    };
    match run(messages) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("failover_peer: {e}");
            ExitCode::from(1)
        }
    }
}

/// Sends message `seq` to `peer`, remembering a pending one.
fn send(
    m: &mut Messenger,
    pending: &mut HashMap<SendId, (u32, u32)>,
    peer: u32,
    seq: u32,
) -> Result<(), String> {
    let body = payload(m.rank(), seq);
    match m.send(peer, TAG, &seq.to_le_bytes(), &body) {
        Ok(SendTicket::Done) => Ok(()),
        Ok(SendTicket::Pending(id)) => {
            pending.insert(id, (peer, seq));
            Ok(())
        }
        Err(e) => Err(format!("send {seq} to rank {peer}: {e}")),
    }
}

fn run(messages: u32) -> Result<(), String> {
    let mut boot = Bootstrap::init().map_err(|e| format!("bootstrap: {e}"))?;
    let (rank, size) = (boot.rank(), boot.size());
    let registry = Registry::open(&Options {
        job: boot.job_info(),
        ..Options::default()
    })
    .map_err(|e| format!("components: {e}"))?;
    let mut m = Messenger::init(&registry, &mut boot).map_err(|e| format!("transports: {e}"))?;

    let received: Rc<RefCell<HashSet<(u32, u32)>>> = Rc::default();
    let bad: Rc<RefCell<Vec<String>>> = Rc::default();
    let (got, wrong) = (Rc::clone(&received), Rc::clone(&bad));
    m.register(TAG, move |msg| {
        let seq = msg.header.try_into().map_or(u32::MAX, u32::from_le_bytes);
        if msg.payload != payload(msg.peer, seq).as_slice() {
            wrong.borrow_mut().push(format!(
                "message {seq} from rank {} arrived changed",
                msg.peer
            ));
        } else if !got.borrow_mut().insert((msg.peer, seq)) {
            wrong.borrow_mut().push(format!(
                "message {seq} from rank {} arrived twice",
                msg.peer
            ));
        }
    })
    .map_err(|e| e.to_string())?;

    let mut pending = HashMap::new();
    for peer in (0..size).filter(|&p| p != rank) {
        for seq in 0..messages {
            send(&mut m, &mut pending, peer, seq)?;
        }
    }
    let expected = (messages as usize) * (size as usize - 1);
    let mut resent = 0usize;
    let mut last = Instant::now();
    while received.borrow().len() < expected || !pending.is_empty() {
        if m.progress().map_err(|e| format!("progress: {e}"))? > 0 {
            last = Instant::now();
        }
        if let Some(e) = bad.borrow().first() {
            return Err(e.clone());
        }
        if let Some((peer, why)) = m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} failed: {why}"));
        }
        for (id, status) in m.take_completions() {
            let Some((peer, seq)) = pending.remove(&id) else {
                return Err(format!("completion of unknown send {id:?}"));
            };
            match status {
                Ok(()) => {}
                Err(SendError::Closed { .. }) => {
                    resent += 1;
                    send(&mut m, &mut pending, peer, seq)?;
                }
                Err(e) => return Err(format!("send {seq} to rank {peer}: {e}")),
            }
        }
        if last.elapsed() > STALL {
            return Err(format!(
                "stalled: {} of {expected} received, {} sends pending",
                received.borrow().len(),
                pending.len()
            ));
        }
    }
    for (component, index, error) in m.closed_modules() {
        println!("rank {rank}: closed {component}[{index}]: {error}");
    }
    boot.barrier().map_err(|e| format!("barrier: {e}"))?;
    if rank == 0 {
        let via = m.route((rank + 1) % size).map(|r| r.component);
        println!(
            "rank 0: received {expected}, resent {resent}, peers now via {}",
            via.unwrap_or_default()
        );
    }
    boot.finalize().map_err(|e| format!("finalize: {e}"))
}
