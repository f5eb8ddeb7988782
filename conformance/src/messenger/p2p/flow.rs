//! The `flow-control` case: a receiver that posts nothing while a sender
//! floods it stores at most `p2p_eager_credits` eager messages' bytes;
//! the rest wait at the sender as rendezvous announcements, and every
//! message is delivered in order once the receives are posted.

use fireopal::btl::StallWatch;
use fireopal::p2p::{Source, Tag};
use fireopal::param::ParamValue;

use super::{check_bytes, check_status, fail, key, pattern, wait_all_ok, Ctx, Outcome, STALL};

const TAG: i32 = 960;
/// Largest payload the case sends: small, so that it is eager on every
/// route.
const MAX_LEN: u64 = 512;

/// Rank 0 sends three times its eager credits and more to rank 1 without
/// waiting; rank 1 makes progress, receiving nothing, until every message
/// has arrived (eager data or announcement). The unexpected bytes it then
/// holds must be at most the credits' worth, and some (the eager ones
/// did come); then it receives them all, each with its bytes, in send
/// order, and none is left over.
pub(super) fn case_flow_control(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let len = c.eager[1].min(MAX_LEN);
    if len == 0 || c.eager[0].min(MAX_LEN) != c.eager[1].min(MAX_LEN) {
        // Rank 1 checks against the length rank 0 uses: both must agree.
        return Ok(Outcome::NotApplicable("no common eager size".into()));
    }
    let len = usize::try_from(len).map_err(|e| e.to_string())?;
    let credits = match c.rt.registry().params().value("p2p_eager_credits") {
        Some(ParamValue::UInt(v)) => usize::try_from(*v).map_err(|e| e.to_string())?,
        other => return Err(format!("p2p_eager_credits is {other:?}")),
    };
    let flood = credits.saturating_mul(3).saturating_add(10).min(10_000);
    let world = c.world.clone();
    let payload = |i: usize| pattern(key(&[16, i as u64]), len);
    c.barrier()?;
    match c.rank {
        0 => {
            let p2p = c.rt.p2p();
            let sends: Vec<_> = (0..flood)
                .map(|i| p2p.isend(&world, 1, TAG, payload(i)))
                .collect();
            wait_all_ok(p2p, sends, |i| format!("flood send {i}"))?;
        }
        1 => {
            let p2p = c.rt.p2p();
            let mut watch = StallWatch::new(STALL);
            while p2p.counts().unexpected < flood {
                let work = p2p.progress().map_err(fail("progress"))?;
                if watch.stalled(work) {
                    return Err(format!(
                        "{} of {flood} messages arrived",
                        p2p.counts().unexpected
                    ));
                }
            }
            let held = p2p.counts();
            let bound = (credits * len) as u64;
            if held.unexpected_bytes > bound || held.unexpected_bytes == 0 {
                return Err(format!(
                    "{} unexpected messages hold {} bytes; {credits} credits of {len} bytes allow {bound}",
                    held.unexpected, held.unexpected_bytes
                ));
            }
            let recvs: Vec<_> = (0..flood)
                .map(|_| p2p.irecv(&world, Source::Rank(0), Tag::Tag(TAG), vec![0u8; len]))
                .collect();
            let got = wait_all_ok(p2p, recvs, |i| format!("flood receive {i}"))?;
            for (i, (buf, st)) in got.into_iter().enumerate() {
                let what = format!("flood message {i}");
                check_status(&what, st, 0, TAG, len)?;
                check_bytes(&what, &buf, &payload(i))?;
            }
            let left = p2p
                .iprobe(&world, Source::Rank(0), Tag::Tag(TAG))
                .map_err(fail("iprobe"))?;
            if let Some(st) = left {
                return Err(format!("a message of {} bytes is left over", st.count));
            }
        }
        _ => {}
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}
