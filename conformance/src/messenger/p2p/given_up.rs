//! Blocking calls that give up after a stall.
//!
//! - `given-up-send`: a blocking rendezvous send that stalls returns its
//!   buffer to the caller, and the receive that matches it later ends,
//!   with an error naming the sender where the data would have been sent
//!   (the pipeline), instead of waiting for data that never comes.
//! - `given-up-recv`: a blocking receive that stalls is withdrawn, so the
//!   messages sent after it go to the receives posted later, not into the
//!   buffer its caller took back.

use std::time::Duration;

use fireopal::p2p::{P2pError, Source, Tag};

use super::{fail, key, pattern, Ctx, Outcome};

/// Large enough to take the rendezvous on every in-tree route.
const LEN: usize = 1 << 20;
const TAG: i32 = 910;
/// The sender tells the receiver its send gave up.
const TAG_GO: i32 = 911;
/// The receiver tells the sender its receive ended.
const TAG_DONE: i32 = 912;
/// The sender's stall limit: nothing answers its rendezvous until it
/// gave up, so the stall happens however busy the machine is.
const SENDER_STALL: Duration = Duration::from_millis(300);

/// Rank 0 sends a rendezvous to rank 1 with a short stall limit while
/// rank 1 posts nothing, so the send stalls and gives up; only then does
/// rank 1 post the matching receive. Where the route pipelines the
/// rendezvous (`p2p_rendezvous=pipeline`) the receive must fail with
/// [`P2pError::SendGivenUp`] naming rank 0; where the receiver reads the
/// sender's buffer it may also complete, with the bytes the buffer still
/// holds (this case leaves them unchanged).
pub(super) fn case_given_up_send(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let pipelined = c.rt.registry().params().str_value("p2p_rendezvous") == Some("pipeline");
    let world = c.world.clone();
    let data = pattern(key(&[10]), LEN);
    c.barrier()?;
    match c.rank {
        0 => {
            let p2p = c.rt.p2p();
            let limit = p2p.stall_limit();
            p2p.set_stall_limit(Some(SENDER_STALL));
            let sent = p2p.send(&world, 1, TAG, &data);
            p2p.set_stall_limit(limit);
            match sent {
                Err(P2pError::Stalled { .. }) => {}
                Err(e) => return Err(format!("the unanswered send failed otherwise: {e}")),
                Ok(()) => return Err("a rendezvous send nobody received completed".into()),
            }
            p2p.send(&world, 1, TAG_GO, &[])
                .map_err(fail("the go-ahead"))?;
            // Waiting here keeps this rank's progress going: it answers
            // the receiver's CTS (or serves its read).
            p2p.recv(&world, Source::Rank(1), Tag::Tag(TAG_DONE), &mut [])
                .map_err(fail("the receiver's word"))?;
        }
        1 => {
            let p2p = c.rt.p2p();
            p2p.recv(&world, Source::Rank(0), Tag::Tag(TAG_GO), &mut [])
                .map_err(fail("the go-ahead"))?;
            let mut buf = vec![0u8; LEN];
            let got = p2p.recv(&world, Source::Rank(0), Tag::Tag(TAG), &mut buf);
            p2p.send(&world, 0, TAG_DONE, &[])
                .map_err(fail("the word to the sender"))?;
            match got {
                Err(P2pError::SendGivenUp { peer: 0 }) => {}
                Err(e) => return Err(format!("the receive failed without saying why: {e}")),
                Ok(_) if pipelined => {
                    return Err("a pipelined receive completed from a send given up".into())
                }
                Ok(status) if status.count != LEN || buf != data => {
                    return Err("a receive read a given-up buffer with wrong bytes".into())
                }
                Ok(_) => {}
            }
        }
        _ => {}
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// The receiver's stall limit: nothing is sent before its receive gave
/// up, so the stall happens however busy the machine is.
const RECEIVER_STALL: Duration = Duration::from_millis(300);

/// Rank 1 waits in a blocking receive, from rank 0 and from anyone, with
/// a short stall limit while rank 0 sends nothing, so each gives up; only
/// then does rank 0 send an eager and a rendezvous message that both
/// withdrawn receives would have matched. Fresh receives must get them
/// whole.
pub(super) fn case_given_up_recv(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let world = c.world.clone();
    let small = pattern(key(&[11]), 8);
    let large = pattern(key(&[12]), LEN);
    c.barrier()?;
    match c.rank {
        0 => {
            let p2p = c.rt.p2p();
            p2p.recv(&world, Source::Rank(1), Tag::Tag(TAG_GO), &mut [])
                .map_err(fail("the go-ahead"))?;
            p2p.send(&world, 1, TAG, &small)
                .map_err(fail("the eager message"))?;
            p2p.send(&world, 1, TAG, &large)
                .map_err(fail("the rendezvous message"))?;
        }
        1 => {
            let p2p = c.rt.p2p();
            let limit = p2p.stall_limit();
            p2p.set_stall_limit(Some(RECEIVER_STALL));
            let mut lost = vec![0u8; LEN];
            let named = p2p.recv(&world, Source::Rank(0), Tag::Tag(TAG), &mut lost);
            let any = p2p.recv(&world, Source::Any, Tag::Any, &mut lost);
            p2p.set_stall_limit(limit);
            for (what, got) in [("named", named), ("wildcard", any)] {
                match got {
                    Err(P2pError::Stalled { .. }) => {}
                    Err(e) => {
                        return Err(format!(
                            "the unmatched {what} receive failed otherwise: {e}"
                        ))
                    }
                    Ok(_) => return Err(format!("a {what} receive nothing was sent to completed")),
                }
            }
            p2p.send(&world, 0, TAG_GO, &[])
                .map_err(fail("the go-ahead"))?;
            let mut buf = vec![0u8; LEN];
            let first = p2p
                .recv(&world, Source::Rank(0), Tag::Tag(TAG), &mut buf)
                .map_err(fail("the eager message"))?;
            if first.count != small.len() || buf[..small.len()] != small[..] {
                return Err("the eager message did not reach the later receive".into());
            }
            let second = p2p
                .recv(&world, Source::Rank(0), Tag::Tag(TAG), &mut buf)
                .map_err(fail("the rendezvous message"))?;
            if second.count != LEN || buf != large {
                return Err("the rendezvous message did not reach the later receive".into());
            }
            if lost.iter().any(|&b| b != 0) {
                return Err("a withdrawn receive's buffer was written".into());
            }
        }
        _ => {}
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}
