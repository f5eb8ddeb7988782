//! Put and get, blocking and non-blocking, of bytes and typed elements;
//! `put_signal`; `wait_until` on a symmetric variable.
//!
//! To this process's heap and to a mapped PE's, a transfer is one copy by
//! the caller, complete when the call returns. To any other PE it is the
//! transport's RDMA into (or from) the PE's registered heap; the
//! transports complete a put once the data is in place at the target, so
//! a completed put is delivered. Over a route without RDMA (or with
//! `shmem_rdma` off) the data travels in messages the target copies: a
//! put is acknowledged and complete at `quiet`, a get waits for the
//! answer. Blocking calls wait for their own
//! operation; non-blocking ones (`_nbi`) are complete at `quiet`.

// Copies into and out of heaps that other processes share, and the
// raw-pointer contract of the non-blocking calls.
#![allow(unsafe_code)]

use std::mem::size_of;

use fireopal_abi::btl::{Access, BtlFlags, MemRegion};
use fireopal_core::wire::shmem::{
    push_put_record, put_record_len, AmoOp, GetRequest, PutRequest, Width,
};

use super::atomic::{execute, AtomicWord};
use super::path::Path;
use super::sync::{self, Watch, NON_FETCHING};
use super::{rank, InFlight, Shmem, ShmemError, TAG_SHMEM};
use crate::btl::{Class, SendId, SendTicket};

mod sealed {
    pub trait Sealed {}
}

/// A plain type that put and get move: integers and floats, whose every
/// bit pattern is a value.
pub trait Element: Copy + sealed::Sealed {}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {}
    )*};
}

element!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

/// How [`Shmem::put_signal`] updates the signal word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// Writes the signal value (`SHMEM_SIGNAL_SET`).
    Set,
    /// Adds it (`SHMEM_SIGNAL_ADD`).
    Add,
}

/// The comparison [`Shmem::wait_until`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitCmp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Greater than.
    Gt,
    /// Greater or equal.
    Ge,
    /// Less than.
    Lt,
    /// Less or equal.
    Le,
}

impl WaitCmp {
    fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Self::Eq => a == b,
            Self::Ne => a != b,
            Self::Gt => a > b,
            Self::Ge => a >= b,
            Self::Lt => a < b,
            Self::Le => a <= b,
        }
    }
}

/// Copies `len` bytes from `src` to `dst` at full speed whatever their
/// alignments (`fireopal_core::copy`), or with `memmove` if they overlap
/// (a put from the heap into itself).
///
/// # Safety
///
/// Both ranges are valid for `len` bytes, `src` for reads and `dst` for
/// writes, and nobody else writes `src` meanwhile.
unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    let (d, s) = (dst as usize, src as usize);
    if d < s.wrapping_add(len) && s < d.wrapping_add(len) {
        // SAFETY: valid ranges, as the caller promises; memmove allows
        // the overlap.
        unsafe { std::ptr::copy(src, dst, len) };
        return;
    }
    // SAFETY: valid, disjoint ranges, as the caller promises and checked
    // above; the slices live only for the copy.
    let (to, from) = unsafe {
        (
            std::slice::from_raw_parts_mut(dst, len),
            std::slice::from_raw_parts(src, len),
        )
    };
    fireopal_core::copy::copy_bytes(to, from);
}

/// Where a transfer's symmetric side is.
enum Target {
    /// In this process (own heap or a mapping), at this address.
    Here(*mut u8),
    /// At this address of the PE, through the transport's RDMA with this
    /// key; `in_order` when RDMA stays in order with messages on the
    /// route (one lane).
    Rdma(u64, std::rc::Rc<[u8]>, bool),
    /// At this offset of the PE's heap, through messages the PE copies.
    Messages(u64),
    /// At this offset of the PE's heap, in the PE's batch of small puts.
    Batch(u64),
}

impl Target {
    /// Where `addr` (at `offset` in the heap) lies on `path`, for a put
    /// that may join a batch if `batchable`.
    #[inline]
    fn on(path: &Path, addr: usize, offset: u64, batchable: bool) -> Self {
        match path {
            Path::Own => Self::Here(addr as *mut u8),
            Path::Mapped { base, .. } => Self::Here(base.wrapping_add(offset as usize)),
            Path::Remote { batch: true, .. } if batchable => Self::Batch(offset),
            Path::Remote {
                base,
                key,
                rdma: true,
                in_order,
                ..
            } => Self::Rdma(base + offset, key.clone(), *in_order),
            Path::Remote { rdma: false, .. } => Self::Messages(offset),
        }
    }
}

/// An operation that completes later: an RDMA operation, or a get through
/// messages (its request).
pub(super) enum Started {
    Rdma(SendId),
    Get(u64),
}

impl Shmem<'_> {
    /// Where `len` bytes at symmetric address `addr` lie on `pe`; a put
    /// that may join a batch (`batchable`) is [`Target::Batch`] on a
    /// route that takes batches.
    #[inline]
    fn target(
        &mut self,
        pe: u32,
        addr: usize,
        len: usize,
        batchable: bool,
    ) -> Result<Target, ShmemError> {
        let offset = self.offset_of(addr, len)?;
        self.with_path(pe, |path| Target::on(path, addr, offset, batchable))
    }

    /// Gathers a put of `data` at `offset` of `pe`'s heap into its batch,
    /// sending the batch first if the put does not fit. The first put
    /// since this process last made progress leaves at once, as a batch
    /// of one.
    fn batch_put(&mut self, pe: u32, offset: u64, data: &[u8]) -> Result<(), ShmemError> {
        let need = put_record_len(data.len());
        let limit = self.st.put_batch;
        if self
            .st
            .batches
            .get(&pe)
            .is_some_and(|b| b.len() + need > limit)
        {
            sync::flush_batch(self.m, self.st, pe)?;
        }
        let spare = &mut self.st.spare_batches;
        let batch = self
            .st
            .batches
            .entry(pe)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        push_put_record(batch, offset, data);
        if !self.st.put_since_progress {
            self.st.put_since_progress = true;
            return sync::flush_batch(self.m, self.st, pe);
        }
        Ok(())
    }

    /// Starts an RDMA operation; its id when it completes later.
    fn start_rdma(
        &mut self,
        pe: u32,
        write: bool,
        local: MemRegion,
        remote: u64,
        key: &[u8],
    ) -> Result<Option<Started>, ShmemError> {
        // A route whose module needs the local buffer registered gets it
        // through the messenger's cache, held until the operation ends.
        let needs_local = self
            .m
            .attributes(rank(pe))
            .is_some_and(|a| a.flags.contains(BtlFlags::NEEDS_LOCAL_REGISTRATION));
        let handle = if needs_local {
            let access = if write {
                Access::LOCAL_READ
            } else {
                Access::LOCAL_WRITE
            };
            Some(self.m.register_memory(rank(pe), local, access)?)
        } else {
            None
        };
        let ticket = self.m.rdma_class(
            Class::OneSided,
            write,
            rank(pe),
            local,
            handle.as_ref(),
            remote,
            key,
        );
        match ticket {
            Ok(SendTicket::Pending(id)) => {
                self.st.pending.insert(id, InFlight { pe, local: handle });
                Ok(Some(Started::Rdma(id)))
            }
            done => {
                if let Some(h) = handle {
                    let _ = self.m.deregister_memory(h);
                }
                done.map(|_| None).map_err(ShmemError::from)
            }
        }
    }

    /// Sends data for `pe` to write at `offset`; acknowledged like a
    /// non-fetching atomic, so complete at `quiet`. Messages to a PE stay
    /// in order, so what is sent after it lands after it.
    fn put_message(&mut self, pe: u32, offset: u64, data: &[u8]) -> Result<(), ShmemError> {
        let request = self.st.next_request() | NON_FETCHING;
        let header = PutRequest { request, offset }.encode();
        self.m
            .send_class(Class::OneSided, rank(pe), TAG_SHMEM, &header, data)?;
        self.st.amo_sent += 1;
        self.st.amo_targets.insert(pe);
        Ok(())
    }

    /// Asks `pe` for `len` bytes at `offset`, which its answer writes at
    /// `dest`.
    fn get_message(
        &mut self,
        pe: u32,
        offset: u64,
        dest: *mut u8,
        len: usize,
    ) -> Result<Started, ShmemError> {
        let request = self.st.next_request();
        let header = GetRequest {
            request,
            offset,
            len: len as u64,
        }
        .encode();
        self.st
            .inbox
            .borrow_mut()
            .gets
            .insert(request, (pe, dest as usize, len));
        if let Err(e) = self
            .m
            .send_class(Class::OneSided, rank(pe), TAG_SHMEM, &header, &[])
        {
            self.st.inbox.borrow_mut().gets.remove(&request);
            return Err(e.into());
        }
        self.st.amo_targets.insert(pe);
        Ok(Started::Get(request))
    }

    /// Waits for one operation and gives its result.
    fn finish(&mut self, pe: u32, started: Option<Started>) -> Result<(), ShmemError> {
        match started {
            None => Ok(()),
            Some(Started::Rdma(id)) => {
                self.wait(Watch::Pe(pe), |st| !st.pending.contains_key(&id))?;
                match self.st.failed.remove(&id) {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
            Some(Started::Get(request)) => {
                let inbox = std::rc::Rc::clone(&self.st.inbox);
                let waited = self.wait(Watch::Pe(pe), |_| {
                    !inbox.borrow().gets.contains_key(&request)
                });
                if waited.is_err() {
                    // The buffer is the caller's again: no answer may
                    // write it now.
                    inbox.borrow_mut().gets.remove(&request);
                }
                waited?;
                let failed = inbox.borrow_mut().failed_gets.remove(&request);
                match failed {
                    Some((pe, status)) => Err(ShmemError::Refused { pe, status }),
                    None => Ok(()),
                }
            }
        }
    }

    /// `shmem_put`: copies `src` to symmetric address `dest` on `pe`;
    /// `src` may be reused when this returns.
    pub fn put<T: Element>(&mut self, pe: u32, dest: *mut T, src: &[T]) -> Result<(), ShmemError> {
        // SAFETY: `src` is a live slice, read before this returns (a
        // transport's operation is waited for below).
        let id =
            unsafe { self.start(pe, true, dest as usize, src.as_ptr().cast_mut(), src.len())? };
        self.finish(pe, id)
    }

    /// `shmem_get`: copies `dest.len()` elements at symmetric address
    /// `src` on `pe` into `dest`.
    pub fn get<T: Element>(
        &mut self,
        pe: u32,
        dest: &mut [T],
        src: *const T,
    ) -> Result<(), ShmemError> {
        // SAFETY: `dest` is a live, exclusive slice, written before this
        // returns.
        let id = unsafe { self.start(pe, false, src as usize, dest.as_mut_ptr(), dest.len())? };
        self.finish(pe, id)
    }

    /// `shmem_put_nbi`: starts copying `n` elements from `src` to
    /// symmetric address `dest` on `pe`; complete at [`quiet`](Self::quiet).
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `n` elements and stay unchanged
    /// until the next `quiet` (or anything that implies one) returns.
    pub unsafe fn put_nbi<T: Element>(
        &mut self,
        pe: u32,
        dest: *mut T,
        src: *const T,
        n: usize,
    ) -> Result<(), ShmemError> {
        // SAFETY: the caller's contract.
        unsafe { self.start(pe, true, dest as usize, src.cast_mut(), n) }.map(drop)
    }

    /// `shmem_get_nbi`: starts copying `n` elements at symmetric address
    /// `src` on `pe` into `dest`; complete at [`quiet`](Self::quiet).
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of `n` elements, and not be read
    /// or written by anyone else until the next `quiet` returns.
    pub unsafe fn get_nbi<T: Element>(
        &mut self,
        pe: u32,
        dest: *mut T,
        src: *const T,
        n: usize,
    ) -> Result<(), ShmemError> {
        // SAFETY: the caller's contract.
        unsafe { self.start(pe, false, src as usize, dest, n) }.map(drop)
    }

    /// Starts a put (`write`) of `n` elements from `local` to symmetric
    /// address `symmetric` on `pe`, or a get of them into `local`; the
    /// operation to wait for, if it completes later.
    ///
    /// # Safety
    ///
    /// `local` is valid for `n` elements, for reads (a put) or writes (a
    /// get), until the operation completes; a get's is touched by no one
    /// else meanwhile, a put's stays unchanged.
    unsafe fn start<T: Element>(
        &mut self,
        pe: u32,
        write: bool,
        symmetric: usize,
        local: *mut T,
        n: usize,
    ) -> Result<Option<Started>, ShmemError> {
        let len = n
            .checked_mul(size_of::<T>())
            .ok_or(ShmemError::NotSymmetric {
                addr: symmetric,
                len: usize::MAX,
            })?;
        self.check_pe(pe)?;
        if len == 0 {
            return Ok(None);
        }
        let local = local.cast::<u8>();
        // Small puts may wait in a batch (up to a quarter of one, so that
        // a batch gathers several).
        let batchable = write && len <= self.st.put_batch / 4;
        let target = self.target(pe, symmetric, len, batchable)?;
        if matches!(target, Target::Rdma(..) | Target::Messages(_)) {
            // What was gathered for this PE goes before this operation.
            sync::flush_batch(self.m, self.st, pe)?;
            // Over several lanes RDMA may pass messages: the batches and
            // atomics sent to this PE land first.
            let passes =
                matches!(target, Target::Rdma(_, _, false)) && self.st.amo_targets.contains(&pe);
            if passes {
                let inbox = std::rc::Rc::clone(&self.st.inbox);
                let sent = self.st.amo_sent;
                self.wait(Watch::Pe(pe), |_| inbox.borrow().acked >= sent)?;
            }
        }
        match target {
            Target::Here(there) => {
                let (to, from) = if write {
                    (there, local)
                } else {
                    (local, there)
                };
                // SAFETY: `there` is `len` bytes inside this heap or the
                // mapping of `pe`'s (checked by `target`); `local` is
                // valid per the contract.
                unsafe { copy(to, from, len) };
                self.done_alone().map(|()| None)
            }
            Target::Rdma(remote, key, _) => {
                // SAFETY: valid until completion, per the contract; a put
                // only reads it.
                let region = unsafe { MemRegion::new(local, len) };
                self.start_rdma(pe, write, region, remote, &key)
            }
            Target::Messages(offset) if write => {
                // SAFETY: valid for reads, per the contract; the messenger
                // copies it before `send` returns.
                let data = unsafe { std::slice::from_raw_parts(local, len) };
                self.put_message(pe, offset, data).map(|()| None)
            }
            Target::Messages(offset) => self.get_message(pe, offset, local, len).map(Some),
            Target::Batch(offset) => {
                // SAFETY: valid for reads, per the contract; copied into
                // the batch before this returns.
                let data = unsafe { std::slice::from_raw_parts(local, len) };
                self.batch_put(pe, offset, data).map(|()| None)
            }
        }
    }

    /// `shmem_put_signal`: copies `src` to `dest` on `pe`, then updates
    /// the 64-bit signal word `sig` there with `signal` (`op`); a PE that
    /// sees the signal sees the data.
    pub fn put_signal<T: Element>(
        &mut self,
        pe: u32,
        dest: *mut T,
        src: &[T],
        sig: *mut u64,
        signal: u64,
        op: SignalOp,
    ) -> Result<(), ShmemError> {
        // The data is in place when `put` returns (a stored copy, or a
        // completed transport put), before the signal is sent.
        self.put(pe, dest, src)?;
        match op {
            SignalOp::Set => self.atomic_set(pe, sig, signal),
            SignalOp::Add => self.atomic_add(pe, sig, signal),
        }
    }

    /// `shmem_wait_until`: makes progress until the symmetric word `ivar`
    /// of this PE compares with `value` as `cmp` says; returns the word.
    pub fn wait_until<T: AtomicWord + PartialOrd>(
        &mut self,
        ivar: *mut T,
        cmp: WaitCmp,
        value: T,
    ) -> Result<T, ShmemError> {
        let width: Width = T::WIDTH;
        let addr = ivar as usize;
        self.offset_of(addr, width.bytes() as usize)?;
        if addr % width.bytes() as usize != 0 {
            return Err(ShmemError::Misaligned(addr));
        }
        let load = || {
            // SAFETY: an aligned word inside this process's heap (checked
            // above), which other PEs update only atomically.
            T::from_bits(unsafe { execute(addr as *mut u8, AmoOp::Fetch, width, 0, 0) })
        };
        let mut seen = load();
        if !cmp.holds(seen, value) {
            self.wait(Watch::Pending, |_| {
                seen = load();
                cmp.holds(seen, value)
            })?;
        }
        Ok(seen)
    }
}
