//! A rank of a two-rank job over tcp whose last message a socket takes
//! only in part, for tests/tests/p2p.rs. Run under `fireopal run -n 2`
//! with small socket buffers (`btl_tcp_sndbuf`, `btl_tcp_rcvbuf`) and
//! an eager limit above the message:
//!
//! ```text
//! drain_peer LEN
//! ```
//!
//! 1. Both install their handler and meet at a barrier; rank 0 sends a
//!    short message and rank 1 answers it, so the connection is up both
//!    ways.
//! 2. Rank 1 enters the job's barrier, which makes no progress on the
//!    messenger, so it reads nothing more. Rank 0 sends one message of
//!    LEN bytes, more than both socket buffers hold: the transport's
//!    immediate send writes the start, keeps the rest and reports the
//!    message sent. Rank 0 checks that the messenger now counts no send
//!    pending, bytes unsent and is not drained, and joins the barrier.
//! 3. Rank 0 makes progress until the messenger is drained, then meets
//!    rank 1 at a barrier that makes no progress, as a runtime's close
//!    does. Rank 1 makes progress until the message is whole, checks its
//!    bytes, and joins that barrier.
//! 4. Both finalize.
//!
//! A rank that finds anything wrong exits with status 1; every wait is
//! bounded.

use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use fireopal::btl::SendTicket;
use fireopal::Runtime;

const TAG: u8 = 11;
/// Guards against a hang only; the outcome never depends on it.
const STALL: Duration = Duration::from_secs(60);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8 ^ 0xA5).collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(len) = args.first().and_then(|a| a.parse::<usize>().ok()) else {
        eprintln!("usage: drain_peer LEN");
        return ExitCode::from(2);
    };
    match run(len) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drain_peer: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(len: usize) -> Result<(), String> {
    let mut rt = Runtime::init().map_err(|e| format!("init: {e}"))?;
    let (rank, size) = (rt.rank(), rt.size());
    if size != 2 {
        return Err(format!("wants 2 ranks, has {size}"));
    }
    let peer = 1 - rank;
    let arrived: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let sink = Rc::clone(&arrived);
    rt.messenger()
        .register(TAG, move |msg| sink.borrow_mut().push(msg.payload.to_vec()))
        .map_err(|e| format!("register: {e}"))?;
    let seen = |n: usize| arrived.borrow().len() >= n;
    // A message for a tag with no handler yet is dropped: both install
    // theirs before anything is sent.
    rt.bootstrap()
        .barrier()
        .map_err(|e| format!("barrier: {e}"))?;
    let m = rt.messenger();

    // 1. The connection, both ways.
    if rank == 0 {
        m.send(peer, TAG, &[], b"hello")
            .map_err(|e| format!("send: {e}"))?;
    }
    m.wait_until(|_| seen(1), STALL)
        .map_err(|e| format!("first message: {e}"))?;
    if rank == 1 {
        m.send(peer, TAG, &[], b"hello")
            .map_err(|e| format!("send: {e}"))?;
    }
    m.wait_until(|m| m.drained(), STALL)
        .map_err(|e| format!("answer: {e}"))?;

    // 2. A message the socket takes in part.
    let data = pattern(len);
    if rank == 0 {
        let ticket = m
            .send(peer, TAG, &[], &data)
            .map_err(|e| format!("send: {e}"))?;
        let (pending, unsent, drained) = (m.pending_sends(), m.unsent(), m.drained());
        println!(
            "rank 0: ticket {ticket:?}, pending {pending}, unsent {unsent}, drained {drained}"
        );
        if ticket != SendTicket::Done || pending != 0 {
            return Err("the message was not taken by an immediate send".into());
        }
        if unsent == 0 || unsent >= len as u64 {
            return Err(format!("{unsent} of {len} bytes unsent: not taken in part"));
        }
        if drained {
            return Err("drained while bytes wait in the transport".into());
        }
    }
    rt.bootstrap()
        .barrier()
        .map_err(|e| format!("barrier: {e}"))?;

    // 3. Rank 0 drains; rank 1 reads; then a barrier without progress.
    let m = rt.messenger();
    if rank == 0 {
        m.wait_until(|m| m.drained(), STALL)
            .map_err(|e| format!("drain: {e}"))?;
    } else {
        m.wait_until(|_| seen(2), STALL)
            .map_err(|e| format!("the message: {e}"))?;
        let got = arrived.borrow();
        if got[1] != data {
            return Err(format!(
                "the message arrived altered: {} bytes, {} sent",
                got[1].len(),
                data.len()
            ));
        }
        println!("rank 1: received {} bytes intact", got[1].len());
    }
    rt.bootstrap()
        .barrier()
        .map_err(|e| format!("barrier: {e}"))?;
    rt.finalize().map_err(|e| format!("finalize: {e}"))
}
