//! A rank of a two-rank job over several lanes one of which is cut while
//! messages wait on it, for tests/tests/lanes.rs. Run under `fireopal
//! run -n 2`:
//!
//! ```text
//! lane_loss_peer READY GO MESSAGES
//! ```
//!
//! 1. Both ranks exchange a few messages, so that every lane is up, and
//!    meet at a barrier.
//! 2. Rank 0 sends MESSAGES numbered messages of mixed sizes (some large
//!    enough to be striped) to rank 1, which does not read, so they wait
//!    in both lanes' socket buffers and in the transport's queues, and
//!    starts a put of 4 MiB into memory rank 1 registered, striped over
//!    the lanes. Rank 0 then creates the file READY.
//! 3. Both wait, without progress, until the file GO exists: meanwhile
//!    the test cuts one lane's connection, losing what waited on it.
//! 4. Rank 0 progresses until its put is complete and then sends one more
//!    message; rank 1 until it has every message, then checks the bytes
//!    the put wrote and answers; rank 0 until that answer. Rank 1 checks
//!    that each message arrives once, in order, intact; any failed peer,
//!    send or put ends the rank with exit status 1.
//!
//! Each rank prints how many lanes to the other it has left.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::bootstrap::Bootstrap;
use fireopal::btl::{Messenger, SendId, SendTicket};
use fireopal::plugin::{Options, Registry};
use fireopal_abi::btl::{Access, MemRegion};

const TAG: u8 = 9;
/// Tag of the message carrying rank 1's window: its address and key.
const WINDOW_TAG: u8 = 10;
const PUT_LEN: usize = 4 << 20;
const WARM_UP: u32 = 64;
/// Guards against a hang only; the outcome never depends on them.
const STALL: Duration = Duration::from_secs(60);
const GO_WAIT: Duration = Duration::from_secs(120);

/// Bytes of message `seq`: mostly small, every 97th one 384 KiB.
fn payload(seq: u32) -> Vec<u8> {
    let len = if seq % 97 == 50 {
        384 << 10
    } else {
        8 + (seq as usize % 61) * 53
    };
    (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(2654435761)) as u8)
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ready, go, messages] = args.as_slice() else {
        eprintln!("usage: lane_loss_peer READY GO MESSAGES");
        return ExitCode::from(2);
    };
    let Ok(messages) = messages.parse::<u32>() else {
        eprintln!("lane_loss_peer: MESSAGES is a number");
        return ExitCode::from(2);
    };
    match run(&PathBuf::from(ready), &PathBuf::from(go), messages) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lane_loss_peer: {e}");
            ExitCode::from(1)
        }
    }
}

/// The bytes rank 0 puts.
fn put_pattern() -> Vec<u8> {
    (0..PUT_LEN).map(|i| (i % 251) as u8 ^ 0x5A).collect()
}

/// Progresses until `done` holds, failing on a failed peer, a failed
/// send, a message out of order, or a stall; the ids of operations that
/// completed go to `completed`.
fn progress_until(
    m: &mut Messenger,
    bad: &Rc<RefCell<Option<String>>>,
    completed: &mut Vec<SendId>,
    mut done: impl FnMut(&Messenger, &[SendId]) -> bool,
) -> Result<(), String> {
    let mut last = Instant::now();
    while !done(m, completed) {
        if m.progress().map_err(|e| format!("progress: {e}"))? > 0 {
            last = Instant::now();
        }
        if let Some(e) = bad.borrow().clone() {
            return Err(e);
        }
        if let Some((peer, why)) = m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} failed: {why}"));
        }
        for (id, status) in m.take_completions() {
            status.map_err(|e| format!("a send or put failed: {e}"))?;
            completed.push(id);
        }
        if last.elapsed() > STALL {
            return Err("stalled".into());
        }
    }
    Ok(())
}

fn send(m: &mut Messenger, peer: u32, seq: u32) -> Result<(), String> {
    match m.send(peer, TAG, &seq.to_le_bytes(), &payload(seq)) {
        Ok(SendTicket::Done | SendTicket::Pending(_)) => Ok(()),
        Err(e) => Err(format!("send {seq}: {e}")),
    }
}

fn wait_for(path: &Path) -> Result<(), String> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > GO_WAIT {
            return Err(format!("{} never appeared", path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn run(ready: &Path, go: &Path, messages: u32) -> Result<(), String> {
    let mut boot = Bootstrap::init().map_err(|e| format!("bootstrap: {e}"))?;
    let rank = boot.rank();
    if boot.size() != 2 {
        return Err("runs on 2 ranks".into());
    }
    let peer = 1 - rank;
    let registry = Registry::open(&Options {
        job: boot.job_info(),
        ..Options::default()
    })
    .map_err(|e| format!("components: {e}"))?;
    let mut m = Messenger::init(&registry, &mut boot).map_err(|e| format!("transports: {e}"))?;

    let window: Rc<RefCell<Vec<u8>>> = Rc::default();
    let published = Rc::clone(&window);
    m.register(WINDOW_TAG, move |msg| {
        *published.borrow_mut() = msg.header.to_vec();
    })
    .map_err(|e| e.to_string())?;
    // Rank 1's window, rank 0's source: neither moves nor is dropped
    // before the end, after every operation on them completed.
    let mut memory = if rank == 0 {
        put_pattern()
    } else {
        vec![0u8; PUT_LEN]
    };
    // SAFETY: see above; this function reads `memory` only once the put
    // into it is complete.
    #[allow(unsafe_code)]
    let region = unsafe { MemRegion::new(memory.as_mut_ptr(), PUT_LEN) };
    let access = if rank == 0 {
        Access::LOCAL_READ
    } else {
        Access::REMOTE_WRITE
    };
    let handle = m
        .register_memory(peer, region, access)
        .map_err(|e| format!("registering: {e}"))?;
    if rank == 1 {
        let mut header = (region.as_ptr() as u64).to_le_bytes().to_vec();
        header.extend_from_slice(handle.remote_key());
        m.send(peer, WINDOW_TAG, &header, &[])
            .map_err(|e| format!("sending the window: {e}"))?;
    }

    let next: Rc<RefCell<u32>> = Rc::default();
    let bad: Rc<RefCell<Option<String>>> = Rc::default();
    let (got, wrong) = (Rc::clone(&next), Rc::clone(&bad));
    m.register(TAG, move |msg| {
        let seq = msg.header.try_into().map_or(u32::MAX, u32::from_le_bytes);
        let mut want = got.borrow_mut();
        let mut wrong = wrong.borrow_mut();
        if seq != *want {
            wrong.get_or_insert(format!("message {seq} arrived when {} was due", *want));
        } else if msg.payload != payload(seq).as_slice() {
            wrong.get_or_insert(format!("message {seq} arrived changed"));
        }
        *want = want.wrapping_add(1);
    })
    .map_err(|e| e.to_string())?;

    for seq in 0..WARM_UP {
        send(&mut m, peer, seq)?;
    }
    let mut completed = Vec::new();
    let arrived = Rc::clone(&next);
    let has_window = Rc::clone(&window);
    progress_until(&mut m, &bad, &mut completed, |m, _| {
        *arrived.borrow() == WARM_UP
            && m.pending_sends() == 0
            && (rank == 1 || !has_window.borrow().is_empty())
    })?;
    boot.barrier().map_err(|e| format!("barrier: {e}"))?;

    let mut put = None;
    if rank == 0 {
        for seq in WARM_UP..WARM_UP + messages {
            send(&mut m, peer, seq)?;
        }
        let window = window.borrow().clone();
        let (addr, key) = window.split_at(8.min(window.len()));
        let addr = addr.try_into().map_or(0, u64::from_le_bytes);
        put = match m.put(peer, region, Some(&handle), addr, key) {
            Ok(SendTicket::Pending(id)) => Some(id),
            Ok(SendTicket::Done) => None,
            Err(e) => return Err(format!("put: {e}")),
        };
        std::fs::write(ready, b"").map_err(|e| format!("{}: {e}", ready.display()))?;
    }
    wait_for(go)?;

    if rank == 0 {
        progress_until(&mut m, &bad, &mut completed, |_, done| {
            put.is_none_or(|id| done.contains(&id))
        })?;
        send(&mut m, peer, WARM_UP + messages)?;
    }
    // Rank 1 answers once it has everything: rank 0 progresses until
    // then, since what rank 1 lost comes again from rank 0.
    let total = WARM_UP + if rank == 1 { messages + 1 } else { 1 };
    let arrived = Rc::clone(&next);
    progress_until(&mut m, &bad, &mut completed, |_, _| {
        *arrived.borrow() == total
    })?;
    if rank == 1 {
        if memory != put_pattern() {
            return Err("the put's bytes differ".into());
        }
        send(&mut m, peer, WARM_UP)?;
    }
    progress_until(&mut m, &bad, &mut completed, |m, _| m.pending_sends() == 0)?;
    m.deregister_memory(handle)
        .map_err(|e| format!("deregistering: {e}"))?;
    println!(
        "rank {rank}: received {} in order, {} lanes left",
        *next.borrow(),
        m.lanes(peer).len()
    );
    boot.barrier().map_err(|e| format!("barrier: {e}"))?;
    drop(m);
    boot.finalize().map_err(|e| format!("finalize: {e}"))
}
