//! Cases on what a module says about itself and its peers.

use fireopal_abi::btl::{BtlComponentImpl, BtlFlags, PeerAddress, Reachability, Transport};

use super::Outcome;
use crate::job::{ensure, Failure, Job, Setup};
use crate::pattern::pattern;

/// The limits agree with each other and do not change between calls.
pub(super) fn attributes<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let job = Job::<C::Module>::open::<C>(setup)?;
    for p in &job.procs {
        let a = &p.attributes;
        let again = p
            .module
            .attributes()
            .map_err(|e| Failure(format!("attributes on rank {}: {e}", p.rank)))?;
        ensure(again == *a, || {
            format!("attributes changed between calls: {a:?} then {again:?}")
        })?;
        ensure(a.flags.contains(BtlFlags::SEND), || {
            "every transport sends: the SEND flag is missing".into()
        })?;
        ensure(a.max_send_size > 0 && a.max_header_size > 0, || {
            format!(
                "max_send_size {} and max_header_size {} must be positive",
                a.max_send_size, a.max_header_size
            )
        })?;
        ensure(a.max_sendi_size <= a.max_send_size, || {
            format!(
                "max_sendi_size {} exceeds max_send_size {}",
                a.max_sendi_size, a.max_send_size
            )
        })?;
        ensure(a.eager_limit <= a.max_send_size, || {
            format!(
                "eager_limit {} exceeds max_send_size {}",
                a.eager_limit, a.max_send_size
            )
        })?;
        let rdma = a.flags.contains(BtlFlags::PUT) || a.flags.contains(BtlFlags::GET);
        ensure(!rdma || a.registration_handle_size > 0, || {
            "a module offering put or get must say how long its remote keys are".into()
        })?;
    }
    Ok(Outcome::Passed)
}

/// Addresses are published; a malformed or foreign address gets one
/// answer per entry, unreachable, and the module still works afterwards.
pub(super) fn addresses<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::open::<C>(setup)?;
    let mut own = Vec::new();
    for p in &job.procs {
        let a = p
            .module
            .address()
            .map_err(|e| Failure(format!("address of rank {}: {e}", p.rank)))?;
        ensure(!a.is_empty(), || {
            format!("rank {} published an empty address", p.rank)
        })?;
        own.push(a);
    }
    // Malformed addresses for a rank outside the job: they come from
    // another process and must be parsed with checks.
    let outsider = job.procs.len() as u32 + 7;
    let mut truncated = own[0].clone();
    truncated.truncate(own[0].len() / 2);
    let mut flipped = own[0].clone();
    for b in &mut flipped {
        *b ^= 0x5a;
    }
    let malformed: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0],
        truncated,
        flipped,
        pattern(99, 4096),
        vec![0xff; 65_536],
    ];
    let peers: Vec<PeerAddress<'_>> = malformed
        .iter()
        .enumerate()
        .map(|(i, a)| PeerAddress {
            rank: outsider + i as u32,
            node_local: true,
            address: a.as_slice().into(),
        })
        .collect();
    let p = &mut job.procs[0];
    let answers = p
        .module
        .add_peers(&peers)
        .map_err(|e| Failure(format!("add_peers with malformed addresses: {e}")))?;
    ensure(answers.len() == peers.len(), || {
        format!(
            "{} answers for {} malformed addresses",
            answers.len(),
            peers.len()
        )
    })?;
    for (i, answer) in answers.iter().enumerate() {
        ensure(matches!(answer, Reachability::Unreachable(_)), || {
            format!(
                "malformed address {i} ({} bytes) was found reachable",
                malformed[i].len()
            )
        })?;
    }
    // The module goes on as if nothing happened.
    job.connect()?;
    ensure(!job.pairs().is_empty(), || {
        "no rank reaches any rank".into()
    })?;
    Ok(Outcome::Passed)
}
