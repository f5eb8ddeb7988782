//! Communicators: a group of processes with a context id of its own, and
//! the collective calls that make them ([`P2p::dup`], [`P2p::split`],
//! [`P2p::create`]) and free them ([`P2p::free`]).
//!
//! Context ids are agreed as MPICH agrees them: each process keeps a mask
//! of the ids it has free, the members of the parent communicator and
//! their masks together (an allgather on the parent's collective context),
//! and every member takes the lowest id free on all of them. The ids of
//! one split are the same for every color: its communicators have
//! disjoint members. A communicator with id `c` sends its point-to-point
//! traffic on matching context `2c` and the collectives that make
//! communicators from it on `2c + 1`, so a wildcard receive never sees
//! them.

use std::cell::Cell;
use std::fmt;
use std::rc::Rc;

use fireopal_core::group::Group;
use fireopal_core::p2p::{ContextId, Source, Tag};

use super::protocol::RecvTarget;
use super::request::recv_spec;
use super::{P2p, P2pError};

/// Context ids a process can hand out (the world has 0).
const MAX_CONTEXT_IDS: usize = 4096;
const MASK_WORDS: usize = MAX_CONTEXT_IDS / 64;
/// Tags of the collectives on a collective context.
const TAG_GATHER: i32 = 1;
const TAG_BROADCAST: i32 = 2;
const TAG_FREE: i32 = 3;

/// The context ids this process has free, and those waiting for their
/// contexts to drain before they can be used again.
#[derive(Debug)]
pub(crate) struct ContextIds {
    free: [u64; MASK_WORDS],
    draining: Vec<u32>,
}

impl ContextIds {
    pub(crate) fn new() -> Self {
        let mut free = [u64::MAX; MASK_WORDS];
        free[0] &= !1; // the world's
        ContextIds {
            free,
            draining: Vec::new(),
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        self.free.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn take(&mut self, id: u32) {
        if let Some(w) = self.free.get_mut(id as usize / 64) {
            *w &= !(1u64 << (id % 64));
        }
    }

    fn give_back(&mut self, id: u32) {
        if let Some(w) = self.free.get_mut(id as usize / 64) {
            *w |= 1u64 << (id % 64);
        }
    }
}

pub(crate) struct CommInner {
    id: u32,
    group: Group,
    rank: u32,
    freed: Cell<bool>,
}

impl CommInner {
    pub(crate) fn new(id: u32, group: Group, rank: u32) -> Self {
        CommInner {
            id,
            group,
            rank,
            freed: Cell::new(false),
        }
    }
}

/// A communicator: an ordered group of processes and a context of its
/// own, so that its messages never match receives of another
/// communicator. Cheap to clone (clones are the same communicator).
#[derive(Clone)]
pub struct Communicator {
    inner: Rc<CommInner>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("context_id", &self.inner.id)
            .field("rank", &self.inner.rank)
            .field("size", &self.size())
            .field("freed", &self.inner.freed.get())
            .finish()
    }
}

impl Communicator {
    pub(crate) fn new(inner: CommInner) -> Self {
        Communicator {
            inner: Rc::new(inner),
        }
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// Number of processes.
    pub fn size(&self) -> u32 {
        self.inner.group.size()
    }

    /// The processes, as world ranks in communicator order.
    pub fn group(&self) -> &Group {
        &self.inner.group
    }

    /// The context id the members agreed on.
    pub fn context_id(&self) -> u32 {
        self.inner.id
    }

    /// The world rank of `rank`, if the communicator has it.
    pub fn world_rank(&self, rank: u32) -> Option<u32> {
        self.inner.group.lookup(rank)
    }

    /// Whether [`P2p::free`] was called on it (or a clone).
    pub fn is_freed(&self) -> bool {
        self.inner.freed.get()
    }
}

/// What one member brings to a communicator-making call.
struct Contribution {
    mask: Vec<u8>,
    color: Option<u32>,
    key: i32,
}

impl Contribution {
    const LEN: usize = MASK_WORDS * 8 + 9;

    fn encode(&self) -> Vec<u8> {
        let mut out = self.mask.clone();
        out.push(u8::from(self.color.is_some()));
        out.extend_from_slice(&self.color.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, P2pError> {
        if bytes.len() != Self::LEN {
            return Err(P2pError::Collective(
                "a member's contribution has the wrong length",
            ));
        }
        let (mask, rest) = bytes.split_at(MASK_WORDS * 8);
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let color = match rest[0] {
            0 => None,
            1 => Some(word(&rest[1..5])),
            _ => return Err(P2pError::Collective("a member's color flag is not 0 or 1")),
        };
        Ok(Contribution {
            mask: mask.to_vec(),
            color,
            key: word(&rest[5..9]) as i32,
        })
    }
}

impl P2p {
    /// A communicator with the same processes as `comm` and a new context
    /// (`MPI_Comm_dup`). Collective over `comm`.
    pub fn dup(&mut self, comm: &Communicator) -> Result<Communicator, P2pError> {
        let all = self.agree(comm, None, 0)?;
        let id = self.lowest_common(&all)?;
        Ok(self.install(id, comm.group().clone()))
    }

    /// Splits `comm` by `color` (`None` for `MPI_UNDEFINED`: no new
    /// communicator for this process), ordering each new communicator by
    /// `key`, then by rank in `comm` (`MPI_Comm_split`). Collective over
    /// `comm`.
    pub fn split(
        &mut self,
        comm: &Communicator,
        color: Option<u32>,
        key: i32,
    ) -> Result<Option<Communicator>, P2pError> {
        let all = self.agree(comm, color, key)?;
        let id = self.lowest_common(&all)?;
        let Some(color) = color else {
            // No communicator here: the id stays free on this process.
            self.ids.give_back(id);
            return Ok(None);
        };
        let mut members: Vec<(i32, u32)> = all
            .iter()
            .enumerate()
            .filter(|(_, c)| c.color == Some(color))
            .map(|(r, c)| (c.key, r as u32))
            .collect();
        members.sort_unstable();
        let ranks: Vec<u32> = members.iter().map(|&(_, r)| r).collect();
        let group = comm
            .group()
            .incl(&ranks)
            .map_err(|_| P2pError::Collective("split ranks do not form a group"))?;
        Ok(Some(self.install(id, group)))
    }

    /// A communicator of the processes of `group`, which must all be in
    /// `comm` (`MPI_Comm_create`); `None` on processes outside `group`.
    /// Collective over `comm`, with the same group everywhere.
    pub fn create(
        &mut self,
        comm: &Communicator,
        group: &Group,
    ) -> Result<Option<Communicator>, P2pError> {
        if group.members().any(|w| comm.group().rank_of(w).is_none()) {
            return Err(P2pError::NotASubgroup);
        }
        let all = self.agree(comm, None, 0)?;
        let id = self.lowest_common(&all)?;
        let me = comm.world_rank(comm.rank());
        if me.and_then(|w| group.rank_of(w)).is_none() {
            self.ids.give_back(id);
            return Ok(None);
        }
        Ok(Some(self.install(id, group.clone())))
    }

    /// Frees `comm` (`MPI_Comm_free`); collective over `comm`. Pending
    /// requests on it must be complete. Every member tells every member
    /// (itself included) that it is done, on the collective context; a
    /// transport delivers one sender's messages in order, so once a
    /// member has every notice, every message sent to it on `comm` has
    /// arrived. Then its handle and clones refuse further calls, and the
    /// context id is free again once nothing of `comm` remains in
    /// matching (a message never received keeps it out of use).
    ///
    /// A member that failed makes this an error; `comm` is freed all
    /// the same.
    pub fn free(&mut self, comm: Communicator) -> Result<(), P2pError> {
        if comm.is_freed() || comm.context_id() == 0 {
            return Ok(());
        }
        let context = comm.context_id() * 2 + 1;
        let tag = Tag::Tag(TAG_FREE);
        let mut first_error = None;
        let mut notices = Vec::new();
        for r in 0..comm.size() {
            let failed = self.check_recv(&comm, Source::Rank(r), tag)?;
            let nowhere = RecvTarget {
                ptr: std::ptr::null_mut(),
                cap: 0,
                owned: None,
            };
            let spec = recv_spec(context, Source::Rank(r), tag);
            notices.push(self.start_recv(&comm, spec, nowhere, failed, false));
        }
        for r in 0..comm.size() {
            if let Err(e) = self.send_on(&comm, context, r, TAG_FREE, &[]) {
                first_error.get_or_insert(e);
            }
        }
        for id in notices {
            if let Err(e) = self.finish_blocking(id) {
                first_error.get_or_insert(e);
            }
        }
        comm.inner.freed.set(true);
        let id = comm.context_id();
        self.proto.borrow_mut().groups.remove(id);
        self.ids.draining.push(id);
        self.retire_drained();
        first_error.map_or(Ok(()), Err)
    }

    /// Gives back the ids of freed communicators whose contexts are empty.
    pub(super) fn retire_drained(&mut self) {
        let mut still = Vec::new();
        for id in std::mem::take(&mut self.ids.draining) {
            let retired = {
                let engine = &mut self.proto.borrow_mut().engine;
                let p2p = engine.retire_context(ContextId(2 * id));
                let coll = engine.retire_context(ContextId(2 * id + 1));
                p2p.is_ok() && coll.is_ok()
            };
            if retired {
                self.forget_sequences(id);
                self.ids.give_back(id);
            } else {
                still.push(id);
            }
        }
        self.ids.draining = still;
    }

    /// Every member's contribution, in `comm` rank order: its free mask,
    /// `color` and `key`.
    fn agree(
        &mut self,
        comm: &Communicator,
        color: Option<u32>,
        key: i32,
    ) -> Result<Vec<Contribution>, P2pError> {
        self.retire_drained();
        let mine = Contribution {
            mask: self.ids.to_bytes(),
            color,
            key,
        };
        self.allgather(comm, &mine.encode())?
            .iter()
            .map(|b| Contribution::decode(b))
            .collect()
    }

    /// The lowest id free on every member; taken on this process.
    fn lowest_common(&mut self, all: &[Contribution]) -> Result<u32, P2pError> {
        let mut common = [u64::MAX; MASK_WORDS];
        for c in all {
            for (w, bytes) in common.iter_mut().zip(c.mask.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(bytes);
                *w &= u64::from_le_bytes(b);
            }
        }
        let (word, bits) = common
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .ok_or(P2pError::NoContextId)?;
        let id = (word * 64) as u32 + bits.trailing_zeros();
        self.ids.take(id);
        Ok(id)
    }

    fn install(&mut self, id: u32, group: Group) -> Communicator {
        let me = self.world.rank();
        let rank = group.rank_of(me).unwrap_or(0);
        self.proto.borrow_mut().groups.insert(id, group.clone());
        Communicator::new(CommInner::new(id, group, rank))
    }

    /// Gathers every member's `mine` on every member, in rank order: to
    /// rank 0 of `comm`, then from it, on the collective context.
    fn allgather(&mut self, comm: &Communicator, mine: &[u8]) -> Result<Vec<Vec<u8>>, P2pError> {
        let context = comm.context_id() * 2 + 1;
        let size = comm.size() as usize;
        let all = if comm.rank() == 0 {
            let mut all = vec![mine.to_vec()];
            for r in 1..comm.size() {
                all.push(self.recv_any_length(comm, context, r, TAG_GATHER)?);
            }
            let mut packed = Vec::new();
            for part in &all {
                packed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                packed.extend_from_slice(part);
            }
            for r in 1..comm.size() {
                self.send_on(comm, context, r, TAG_BROADCAST, &packed)?;
            }
            all
        } else {
            self.send_on(comm, context, 0, TAG_GATHER, mine)?;
            let packed = self.recv_any_length(comm, context, 0, TAG_BROADCAST)?;
            unpack(&packed, size)?
        };
        if all.len() != size {
            return Err(P2pError::Collective(
                "a gather has the wrong number of parts",
            ));
        }
        Ok(all)
    }

    /// Receives the next message from `source` with `tag`, whatever its
    /// length.
    fn recv_any_length(
        &mut self,
        comm: &Communicator,
        context: u32,
        source: u32,
        tag: i32,
    ) -> Result<Vec<u8>, P2pError> {
        let (src, tg) = (Source::Rank(source), Tag::Tag(tag));
        let status = self.probe_on(comm, context, src, tg)?;
        let mut buf = vec![0u8; status.count];
        let got = self.recv_on(comm, context, src, tg, &mut buf)?;
        buf.truncate(got.count);
        Ok(buf)
    }
}

/// The parts of a packed gather.
fn unpack(mut packed: &[u8], parts: usize) -> Result<Vec<Vec<u8>>, P2pError> {
    let mut out = Vec::with_capacity(parts);
    while !packed.is_empty() {
        let (len, rest) = packed
            .split_first_chunk::<8>()
            .ok_or(P2pError::Collective("a packed gather is cut short"))?;
        let len = usize::try_from(u64::from_le_bytes(*len)).unwrap_or(usize::MAX);
        if len > rest.len() {
            return Err(P2pError::Collective("a packed gather is cut short"));
        }
        let (part, rest) = rest.split_at(len);
        out.push(part.to_vec());
        packed = rest;
    }
    Ok(out)
}
