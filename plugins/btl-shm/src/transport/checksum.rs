//! `btl_shm_checksum`: the checksums put on fragments and rendezvous
//! payloads, and their checks (what they cover is
//! [`fireopal_core::shmq::sum`]'s).
//!
//! The transport calls in at a few places: a fragment is sealed with its
//! trailer where it is written ([`Peer::seal`]), and opened where it is
//! read ([`open`]); a staged payload is summed as it is copied
//! ([`write_staged`]), an in-place one when its request is made
//! ([`State::rts_sum`]); a rendezvous payload is checked by the sink it is
//! delivered through ([`Checked`]). Peers agree on the parameter through
//! their addresses ([`State::agree`]), so each end knows whether a trailer
//! is there without a flag in every fragment.

use fireopal_abi::btl::{EventSink, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::PluginError;
use fireopal_core::checksum::Fletcher64;
use fireopal_core::shmq::sum::{self, TRAILER};
use fireopal_core::shmq::{Kind, Malformed};
use fireopal_core::wire::shm::Address;

use super::{Counters, Origin, Peer, State};
use crate::mem::{self, View};
use crate::queue::Frag;
use crate::PARAM_CHECKSUM;

/// Bytes copied into a staging segment before they are summed: small
/// enough that the sum reads them from the cache the copy filled.
const STAGE_CHUNK: usize = 32 << 10;

/// Bytes a trailer adds to each fragment when checksums are `on`.
pub(super) fn trailer_len(on: bool) -> usize {
    if on {
        TRAILER
    } else {
        0
    }
}

/// What an error calls corrupt data: a checksum mismatch says so and
/// names the parameter; anything else keeps `what`.
pub(super) fn describe<'w>(what: &'w str, e: &Malformed) -> &'w str {
    match e {
        Malformed::Checksum { .. } => "shm checksum mismatch (btl_shm_checksum)",
        _ => what,
    }
}

impl Peer {
    /// `frag` as it is written to this peer with sequence number `seq`:
    /// with checksums, its trailer (kept in `trailer`) as the last part,
    /// which every sender leaves empty for it.
    #[inline]
    pub(super) fn seal<'a>(
        &self,
        seq: u32,
        frag: &Frag<'a>,
        trailer: &'a mut [u8; TRAILER],
    ) -> Frag<'a> {
        if !self.checksum {
            return *frag;
        }
        debug_assert!(frag.parts[2].is_empty(), "the last part is the trailer's");
        *trailer = sum::trailer(seq, frag.kind, frag.tag, frag.hdr_len, &frag.parts);
        let trailer: &'a [u8] = trailer;
        Frag {
            parts: [frag.parts[0], frag.parts[1], trailer],
            ..*frag
        }
    }
}

/// A fragment's data without its trailer, once the trailer is checked
/// (when checksums are `on`); a mismatch is counted.
#[inline]
pub(super) fn open<'d>(
    on: bool,
    counters: &mut Counters,
    seq: u32,
    (kind, tag, hdr_len): (Kind, u8, u8),
    data: &'d [u8],
) -> Result<&'d [u8], Malformed> {
    if !on {
        return Ok(data);
    }
    sum::open_fragment(seq, kind, tag, hdr_len, data).inspect_err(|e| {
        if matches!(e, Malformed::Checksum { .. }) {
            counters.checksum_errors += 1;
        }
    })
}

/// Copies `payload` to `off` of a staging segment; with checksums, sums
/// it piece by piece behind the copy and returns the sum.
pub(super) fn write_staged(view: &View<'_>, off: usize, payload: &[u8], on: bool) -> Option<u64> {
    if !on {
        view.write(off, payload);
        return None;
    }
    let mut f = Fletcher64::new();
    for (i, piece) in payload.chunks(STAGE_CHUNK).enumerate() {
        view.write(off + i * STAGE_CHUNK, piece);
        // The private copy, not the shared one: what the sender meant.
        f.update(piece);
    }
    Some(f.finish())
}

impl State {
    /// The payload checksum of a rendezvous request for `origin`, when
    /// checksums are on: the staged copy's, or that of the memory an
    /// in-place send leaves where it is.
    pub(super) fn rts_sum(&self, origin: &Origin) -> Option<u64> {
        if !self.cfg.checksum {
            return None;
        }
        match origin {
            Origin::Staged(slot) => slot.sum,
            &Origin::InPlace { addr, len, .. } => {
                // SAFETY: an in-place payload stays valid and unchanged
                // until its completion (`send_in_place`'s contract), which
                // has not happened: the request is being made.
                let bytes = unsafe { mem::local_bytes(addr, len) };
                Some(sum::payload(bytes))
            }
        }
    }

    /// Whether the peer that published `a` uses checksums as this process
    /// does; a difference is logged as a warning (the job's ranks should
    /// all have the same parameter) and the peer is not reached.
    pub(super) fn agree(&self, a: &Address) -> Result<(), String> {
        if a.checksum == self.cfg.checksum {
            return Ok(());
        }
        let yes_no = |on| if on { "yes" } else { "no" };
        let why = format!(
            "{PARAM_CHECKSUM} is {} on rank {} and {} here",
            yes_no(a.checksum),
            a.rank,
            yes_no(self.cfg.checksum)
        );
        self.log(
            LogLevel::Warn,
            &format!("shm: rank {} unreachable: {why}", a.rank),
        );
        Err(why)
    }
}

/// A sink that checks a rendezvous payload against the checksum of its
/// request before handing it on; a payload that fails is not handed on.
pub(super) struct Checked<'s> {
    sink: &'s mut dyn EventSink,
    sum: Option<u64>,
    expected: bool,
    bad: Option<Malformed>,
}

impl<'s> Checked<'s> {
    /// Checks payloads against `sum`; with `expected` (checksums on here),
    /// a request without one is corrupt too.
    pub(super) fn new(sink: &'s mut dyn EventSink, sum: Option<u64>, expected: bool) -> Self {
        Self {
            sink,
            sum,
            expected,
            bad: None,
        }
    }

    /// Why the payload was not handed on, if it was not; a checksum
    /// mismatch is counted.
    pub(super) fn verdict(self, counters: &mut Counters) -> Result<(), Malformed> {
        match self.bad {
            None => Ok(()),
            Some(e) => {
                if matches!(e, Malformed::Checksum { .. }) {
                    counters.checksum_errors += 1;
                }
                Err(e)
            }
        }
    }
}

impl std::fmt::Debug for Checked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("sum", &self.sum)
            .field("bad", &self.bad)
            .finish_non_exhaustive()
    }
}

impl EventSink for Checked<'_> {
    fn deliver(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        let checked = match self.sum {
            Some(written) => sum::check_payload(written, payload),
            None if self.expected => Err(Malformed::Inconsistent(
                "rendezvous request without a payload checksum",
            )),
            None => Ok(()),
        };
        match checked {
            Ok(()) => self.sink.deliver(peer, tag, header, payload),
            Err(e) => self.bad = Some(e),
        }
    }

    fn send_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.sink.send_complete(cookie, status);
    }

    fn rdma_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.sink.rdma_complete(cookie, status);
    }

    fn peer_failed(&mut self, peer: Rank, error: PluginError) {
        self.sink.peer_failed(peer, error);
    }
}
