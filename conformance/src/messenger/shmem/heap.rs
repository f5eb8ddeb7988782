//! The collective heap calls: allocation at the same offset on every PE,
//! `calloc`, `realloc` and `free`, the heap exhausted, and the calls and
//! arguments that must be refused without changing anything.

use fireopal::memheap::{AllocError, FreeError};
use fireopal::shmem::{PathKind, Shmem, ShmemError};

use super::{err, Ctx, Outcome};
use crate::messenger::p2p::{key, pattern};

pub(super) fn case_heap(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let me = sh.my_pe();
    let n = sh.n_pes() as usize;
    let a = sh.malloc(100).map_err(err("malloc"))?;
    let z = sh.calloc(n, 8).map_err(err("calloc"))?;
    let off = |p: *mut u8| sh_offset(&sh, p);
    let (oa, oz) = (off(a), off(z));
    // Every PE writes its offsets into PE 0's table; PE 0 compares.
    let table = sh.calloc(2 * n, 8).map_err(err("calloc"))?.cast::<u64>();
    sh.put(0, table.wrapping_add(2 * me as usize), &[oa, oz])
        .map_err(err("put"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    let mut result = Ok(Outcome::Passed);
    if me == 0 {
        let mut got = vec![0u64; 2 * n];
        sh.get(0, &mut got, table).map_err(err("get"))?;
        if got.chunks(2).any(|pair| pair != [oa, oz]) {
            result = Err(format!("offsets differ between PEs: {got:?}"));
        }
    }
    // SAFETY: `z` is `n * 8` bytes of this heap, zeroed by calloc and
    // written by no PE since.
    #[allow(unsafe_code)]
    let zeroed = unsafe { std::slice::from_raw_parts(z, n * 8) };
    if zeroed.iter().any(|&b| b != 0) {
        result = Err("calloc gave bytes that are not zero".into());
    }
    let a2 = sh.realloc(a, 5000).map_err(err("realloc"))?;
    if a2.is_null() {
        result = Err("realloc gave null".into());
    }
    sh.free(table.cast()).map_err(err("free"))?;
    sh.free(z).map_err(err("free"))?;
    sh.free(a2).map_err(err("free"))?;
    if !sh.malloc(0).map_err(err("malloc(0)"))?.is_null() {
        result = Err("malloc(0) is not null".into());
    }
    result
}

fn sh_offset(sh: &Shmem<'_>, p: *mut u8) -> u64 {
    sh.heap().offset_of(p).unwrap_or(u64::MAX)
}

pub(super) fn case_bad_arguments(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let n = sh.n_pes();
    let word = sh.calloc(2, 8).map_err(err("calloc"))?;
    let mut local = [0u8; 8];
    let outside = local.as_mut_ptr();
    let checks: [(&str, Result<(), ShmemError>); 4] = [
        ("a PE past the job", sh.put(n, word, &[1u8]).map(drop)),
        ("memory outside the heap", sh.put(0, outside, &[1u8])),
        (
            "a misaligned word",
            sh.atomic_add(0, word.wrapping_add(1).cast::<u64>(), 1)
                .map(drop),
        ),
        (
            "a range past the heap's end",
            sh.get(
                0,
                &mut [0u8; 16],
                word.wrapping_add(sh.heap().len() as usize - 8),
            ),
        ),
    ];
    for (what, got) in checks {
        match got {
            Err(
                ShmemError::NoSuchPe(_)
                | ShmemError::NotSymmetric { .. }
                | ShmemError::Misaligned(_),
            ) => {}
            other => return Err(format!("{what}: {other:?}")),
        }
    }
    let kind = sh.path_kind(sh.my_pe()).map_err(err("path"))?;
    if kind != PathKind::Own {
        return Err(format!("own PE's path is {kind:?}"));
    }
    sh.barrier_all().map_err(err("barrier"))?;
    sh.free(word).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Whether `got` is the refusal of a collective allocation.
fn refused_alloc(got: &Result<*mut u8, ShmemError>) -> bool {
    matches!(got, Err(ShmemError::Alloc(_)))
}

/// The heap's limits, through the collective calls, the same on every PE:
/// a block larger than the heap, blocks until the heap is full, a
/// `realloc` that cannot grow (the old block keeps its bytes), frees of
/// pointers that are not live blocks, and bad sizes and alignments. Each
/// is refused with an error, and afterwards the whole heap can be
/// allocated again: nothing was lost.
pub(super) fn case_heap_limits(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let total = usize::try_from(sh.heap().len()).map_err(|e| e.to_string())?;
    let got = sh.malloc(total + 1);
    if !refused_alloc(&got) {
        return Err(format!("malloc of more than the heap: {got:?}"));
    }
    let got = sh.calloc(usize::MAX, 2);
    if !refused_alloc(&got) {
        return Err(format!("calloc whose size overflows: {got:?}"));
    }
    match sh.align(3000, 64) {
        Err(ShmemError::Alloc(AllocError::InvalidAlignment(3000))) => {}
        other => return Err(format!("alignment 3000: {other:?}")),
    }

    // Fill the heap with blocks of a 64th of it: the allocator's headers
    // make the 64th fail at the latest.
    let piece = total / 64;
    let mut blocks = Vec::new();
    let full = loop {
        if blocks.len() > 64 {
            return Err(format!(
                "{} blocks of {piece} bytes fit in {total}",
                blocks.len()
            ));
        }
        match sh.malloc(piece) {
            Ok(p) if !p.is_null() => blocks.push(p),
            other => break other,
        }
    };
    if !refused_alloc(&full) || blocks.len() < 16 {
        return Err(format!(
            "after {} blocks of {piece} bytes: {full:?}",
            blocks.len()
        ));
    }

    // A realloc that cannot grow leaves the block and its bytes.
    let kept = blocks[0];
    let bytes = pattern(key(&[20, u64::from(sh.my_pe())]), piece);
    // SAFETY: `kept` is a live block of `piece` bytes of this PE's heap
    // that no other PE writes.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), kept, piece)
    };
    let got = sh.realloc(kept, 8 * piece);
    if !refused_alloc(&got) {
        return Err(format!("realloc past a full heap: {got:?}"));
    }
    // SAFETY: as above: the refused realloc left the block in place.
    #[allow(unsafe_code)]
    let still = unsafe { std::slice::from_raw_parts(kept, piece) };
    if still != bytes.as_slice() {
        return Err("a refused realloc changed the block's bytes".into());
    }
    let mut outside = [0u8; 8];
    match sh.realloc(outside.as_mut_ptr(), 64) {
        Err(ShmemError::Alloc(AllocError::OutsideHeap)) => {}
        other => return Err(format!("realloc of memory outside the heap: {other:?}")),
    }

    // Frees of what is not a live block change nothing.
    match sh.free(outside.as_mut_ptr()) {
        Err(ShmemError::Free(FreeError::OutsideHeap)) => {}
        other => return Err(format!("free of memory outside the heap: {other:?}")),
    }
    match sh.free(kept.wrapping_add(8)) {
        Err(ShmemError::Free(FreeError::NotAllocated(_))) => {}
        other => return Err(format!("free inside a block: {other:?}")),
    }
    let last = blocks.pop().ok_or("no block")?;
    sh.free(last).map_err(err("free"))?;
    match sh.free(last) {
        Err(ShmemError::Free(FreeError::NotAllocated(_))) => {}
        other => return Err(format!("a second free of one block: {other:?}")),
    }
    // SAFETY: as above; the refused frees did not touch it.
    #[allow(unsafe_code)]
    let still = unsafe { std::slice::from_raw_parts(kept, piece) };
    if still != bytes.as_slice() {
        return Err("a refused free changed a live block's bytes".into());
    }

    let filled = blocks.len() + 1;
    for p in blocks {
        sh.free(p).map_err(err("free"))?;
    }
    // Everything came back: as many blocks fit again.
    let mut again = Vec::new();
    for _ in 0..filled {
        again.push(sh.malloc(piece).map_err(err("malloc after the frees"))?);
    }
    for p in again {
        sh.free(p).map_err(err("free"))?;
    }
    Ok(Outcome::Passed)
}
