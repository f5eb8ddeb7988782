//! Atomics on 32- and 64-bit words of a PE's heap: fetch, set, swap,
//! compare-swap, fetch-add and add, and the bitwise fetch-and/or/xor and
//! and/or/xor.
//!
//! On this process's heap and on a mapped PE's, each is one CPU atomic
//! instruction ([`execute`]); on any other PE the target runs the same
//! function in its handler. Non-fetching atomics to a remote PE complete
//! at the next `quiet` (or anything that implies one).

// Atomic instructions on words of the heaps, which other processes share.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use fireopal_core::wire::shmem::{AmoOp, AmoRequest, AmoStatus, Width};

use super::path::Path;
use super::sync::{Watch, NON_FETCHING};
use super::{rank, Shmem, ShmemError, TAG_SHMEM};
use crate::btl::Class;

mod sealed {
    pub trait Sealed {}
}

/// A type remote atomics work on: 32- and 64-bit integers.
pub trait AtomicWord: Copy + sealed::Sealed {
    /// Its width.
    #[doc(hidden)]
    const WIDTH: Width;
    /// Its bits, zero-extended.
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    /// The value of the low bits.
    #[doc(hidden)]
    fn from_bits(bits: u64) -> Self;
}

macro_rules! atomic_word {
    ($($t:ty => $u:ty, $w:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl AtomicWord for $t {
            const WIDTH: Width = $w;
            #[inline]
            fn to_bits(self) -> u64 {
                u64::from(self as $u)
            }
            #[inline]
            fn from_bits(bits: u64) -> Self {
                bits as $u as $t
            }
        }
    )*};
}

atomic_word! {
    u32 => u32, Width::W32;
    i32 => u32, Width::W32;
    u64 => u64, Width::W64;
    i64 => u64, Width::W64;
}

/// Runs `op` on the word at `word` as one CPU atomic instruction (a
/// compare-exchange for compare-swap), sequentially consistent, and
/// returns the word before it.
///
/// # Safety
///
/// `word` points to `width` readable and writable bytes aligned to
/// `width`, which other threads and processes access only atomically
/// while this runs (a plain access racing with it is a data race).
#[inline]
pub(super) unsafe fn execute(
    word: *mut u8,
    op: AmoOp,
    width: Width,
    operand: u64,
    compare: u64,
) -> u64 {
    const SC: Ordering = Ordering::SeqCst;
    match width {
        Width::W32 => {
            // SAFETY: aligned, valid, and only accessed atomically, as the
            // caller promises.
            let a = unsafe { AtomicU32::from_ptr(word.cast::<u32>()) };
            let v = operand as u32;
            u64::from(match op {
                AmoOp::Fetch => a.load(SC),
                AmoOp::Set | AmoOp::Swap => a.swap(v, SC),
                AmoOp::CompareSwap => a
                    .compare_exchange(compare as u32, v, SC, SC)
                    .unwrap_or_else(|old| old),
                AmoOp::FetchAdd => a.fetch_add(v, SC),
                AmoOp::FetchAnd => a.fetch_and(v, SC),
                AmoOp::FetchOr => a.fetch_or(v, SC),
                AmoOp::FetchXor => a.fetch_xor(v, SC),
            })
        }
        Width::W64 => {
            // SAFETY: as above.
            let a = unsafe { AtomicU64::from_ptr(word.cast::<u64>()) };
            match op {
                AmoOp::Fetch => a.load(SC),
                AmoOp::Set | AmoOp::Swap => a.swap(operand, SC),
                AmoOp::CompareSwap => a
                    .compare_exchange(compare, operand, SC, SC)
                    .unwrap_or_else(|old| old),
                AmoOp::FetchAdd => a.fetch_add(operand, SC),
                AmoOp::FetchAnd => a.fetch_and(operand, SC),
                AmoOp::FetchOr => a.fetch_or(operand, SC),
                AmoOp::FetchXor => a.fetch_xor(operand, SC),
            }
        }
    }
}

/// The word at `offset` of a heap of `len` bytes at `base`, if it lies
/// inside and is aligned: what a target checks before it runs a request.
pub(super) fn word_at(
    base: usize,
    len: u64,
    offset: u64,
    width: Width,
) -> Result<usize, AmoStatus> {
    let inside = offset
        .checked_add(width.bytes())
        .is_some_and(|end| end <= len);
    if !inside {
        return Err(AmoStatus::OutOfRange);
    }
    let addr = base + offset as usize;
    if addr % width.bytes() as usize != 0 {
        return Err(AmoStatus::Misaligned);
    }
    Ok(addr)
}

impl Shmem<'_> {
    /// One atomic on `pe`'s word at symmetric address `addr`; the word
    /// before it when `fetch` (a non-fetching one to a remote PE answers 0
    /// at once and completes by `quiet`).
    #[allow(clippy::too_many_arguments)]
    fn amo(
        &mut self,
        pe: u32,
        addr: usize,
        op: AmoOp,
        width: Width,
        operand: u64,
        compare: u64,
        fetch: bool,
    ) -> Result<u64, ShmemError> {
        let offset = self.offset_of(addr, width.bytes() as usize)?;
        if addr % width.bytes() as usize != 0 {
            return Err(ShmemError::Misaligned(addr));
        }
        let word = self.with_path(pe, |path| match path {
            Path::Own => Some(addr as *mut u8),
            Path::Mapped { base, .. } => Some(base.wrapping_add(offset as usize)),
            Path::Remote { .. } => None,
        })?;
        let Some(word) = word else {
            return self.amo_remote(pe, offset, op, width, operand, compare, fetch);
        };
        // SAFETY: the word lies inside this heap or the mapping of `pe`'s
        // (checked by `offset_of` against the heap's length, which every
        // PE's has), aligned (checked above) since bases are page aligned;
        // OpenSHMEM leaves a plain access racing with an atomic undefined.
        let old = unsafe { execute(word, op, width, operand, compare) };
        self.done_alone()?;
        Ok(old)
    }

    #[allow(clippy::too_many_arguments)]
    fn amo_remote(
        &mut self,
        pe: u32,
        offset: u64,
        op: AmoOp,
        width: Width,
        operand: u64,
        compare: u64,
        fetch: bool,
    ) -> Result<u64, ShmemError> {
        // Puts gathered for this PE land before the atomic.
        super::sync::flush_batch(self.m, self.st, pe)?;
        let request = self.st.next_request() | if fetch { 0 } else { NON_FETCHING };
        let msg = AmoRequest {
            op,
            width,
            request,
            offset,
            operand,
            compare,
        }
        .encode();
        self.m
            .send_class(Class::OneSided, rank(pe), TAG_SHMEM, &msg, &[])?;
        if !fetch {
            self.st.amo_sent += 1;
            self.st.amo_targets.insert(pe);
            return Ok(0);
        }
        let inbox = std::rc::Rc::clone(&self.st.inbox);
        self.wait(Watch::Pe(pe), |_| {
            inbox.borrow().replies.contains_key(&request)
        })?;
        let (status, value) = inbox
            .borrow_mut()
            .replies
            .remove(&request)
            .unwrap_or((AmoStatus::OutOfRange, 0));
        match status {
            AmoStatus::Done => Ok(value),
            status => Err(ShmemError::Refused { pe, status }),
        }
    }

    /// `shmem_atomic_fetch`: the word at `src` on `pe`.
    pub fn atomic_fetch<T: AtomicWord>(&mut self, pe: u32, src: *const T) -> Result<T, ShmemError> {
        self.amo(pe, src as usize, AmoOp::Fetch, T::WIDTH, 0, 0, true)
            .map(T::from_bits)
    }

    /// One fetching atomic of `op` with `value` on `pe`'s word at `dest`.
    fn fetching<T: AtomicWord>(
        &mut self,
        op: AmoOp,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.amo(pe, dest as usize, op, T::WIDTH, value.to_bits(), 0, true)
            .map(T::from_bits)
    }

    /// One non-fetching atomic of `op` with `value` on `pe`'s word at
    /// `dest`; complete at `quiet`.
    fn posted<T: AtomicWord>(
        &mut self,
        op: AmoOp,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.amo(pe, dest as usize, op, T::WIDTH, value.to_bits(), 0, false)
            .map(drop)
    }

    /// `shmem_atomic_set`: writes `value` at `dest` on `pe`.
    pub fn atomic_set<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.posted(AmoOp::Set, pe, dest, value)
    }

    /// `shmem_atomic_swap`: writes `value`, returns the word before.
    pub fn atomic_swap<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.fetching(AmoOp::Swap, pe, dest, value)
    }

    /// `shmem_atomic_compare_swap`: writes `value` if the word equals
    /// `cond`; returns the word before.
    pub fn atomic_compare_swap<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        cond: T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.amo(
            pe,
            dest as usize,
            AmoOp::CompareSwap,
            T::WIDTH,
            value.to_bits(),
            cond.to_bits(),
            true,
        )
        .map(T::from_bits)
    }

    /// `shmem_atomic_fetch_add`: adds `value` (wrapping), returns the word
    /// before.
    pub fn atomic_fetch_add<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.fetching(AmoOp::FetchAdd, pe, dest, value)
    }

    /// `shmem_atomic_add`: adds `value` (wrapping); complete at `quiet`.
    pub fn atomic_add<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.posted(AmoOp::FetchAdd, pe, dest, value)
    }

    /// `shmem_atomic_fetch_and`: ands `value` in, returns the word before.
    pub fn atomic_fetch_and<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.fetching(AmoOp::FetchAnd, pe, dest, value)
    }

    /// `shmem_atomic_and`: ands `value` in; complete at `quiet`.
    pub fn atomic_and<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.posted(AmoOp::FetchAnd, pe, dest, value)
    }

    /// `shmem_atomic_fetch_or`: ors `value` in, returns the word before.
    pub fn atomic_fetch_or<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.fetching(AmoOp::FetchOr, pe, dest, value)
    }

    /// `shmem_atomic_or`: ors `value` in; complete at `quiet`.
    pub fn atomic_or<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.posted(AmoOp::FetchOr, pe, dest, value)
    }

    /// `shmem_atomic_fetch_xor`: xors `value` in, returns the word before.
    pub fn atomic_fetch_xor<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<T, ShmemError> {
        self.fetching(AmoOp::FetchXor, pe, dest, value)
    }

    /// `shmem_atomic_xor`: xors `value` in; complete at `quiet`.
    pub fn atomic_xor<T: AtomicWord>(
        &mut self,
        pe: u32,
        dest: *mut T,
        value: T,
    ) -> Result<(), ShmemError> {
        self.posted(AmoOp::FetchXor, pe, dest, value)
    }
}
