//! `PtHeap` driven directly: determinism, alignment, in-place and moving
//! realloc, exhaustion, refused offsets, broken headers, and a long random
//! run checked against a model after every call.

use fireopal_abi::memheap::{Allocator, MemheapComponentImpl, Segment};
use fireopal_abi::ErrorKind;
use fireopal_memheap_ptmalloc::heap::{AllocError, FreeError, ReallocError, HEADER, MIN_CHUNK};
use fireopal_memheap_ptmalloc::{PtHeap, PtmallocComponent};

/// Memory for a heap, touched by the test only through raw pointers (the
/// heap writes its headers through its own copy of the base pointer).
struct Arena {
    base: *mut u8,
    len: usize,
    _buf: Vec<u128>,
}

impl Arena {
    fn new(len: usize) -> Arena {
        let mut buf = vec![0u128; len.div_ceil(16)];
        Arena {
            base: buf.as_mut_ptr().cast(),
            len,
            _buf: buf,
        }
    }

    fn segment(&self) -> Segment {
        // SAFETY: the buffer lives as long as the arena, which every test
        // keeps alive while the heap over it is used; the test only touches
        // payloads the heap handed out.
        unsafe { Segment::new(self.base, self.len as u64) }
    }

    fn heap(&self) -> PtHeap {
        PtHeap::new(self.segment())
    }

    fn range(&self, off: u64, len: u64) -> (*mut u8, usize) {
        let (off, len) = (off as usize, len as usize);
        assert!(off + len <= self.len, "range {off}+{len} outside the arena");
        // SAFETY: inside the buffer, checked just above.
        (unsafe { self.base.add(off) }, len)
    }

    fn fill(&self, off: u64, len: u64, byte: u8) {
        let (p, n) = self.range(off, len);
        // SAFETY: `range` checked the bytes lie inside the buffer.
        unsafe { std::ptr::write_bytes(p, byte, n) };
    }

    fn all_equal(&self, off: u64, len: u64, byte: u8) -> bool {
        let (p, n) = self.range(off, len);
        // SAFETY: `range` checked the bytes lie inside the buffer; nothing
        // writes them while this shared view lives.
        let bytes = unsafe { std::slice::from_raw_parts(p, n) };
        bytes.iter().all(|&b| b == byte)
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn first_offsets_are_packed_and_sixteen_aligned() {
    let arena = Arena::new(1 << 16);
    let mut h = arena.heap();
    let a = h.alloc(1, 1).unwrap();
    let b = h.alloc(17, 8).unwrap();
    let c = h.alloc(100, 16).unwrap();
    assert_eq!(a, HEADER);
    assert_eq!(b, a + MIN_CHUNK);
    // 17 bytes + header round to 48.
    assert_eq!(c, b + 48);
    assert!([a, b, c].iter().all(|o| o % 16 == 0));
    assert!(h.usable_size(b).unwrap() >= 17);
    h.check_consistency().unwrap();
}

#[test]
fn zero_size_and_bad_alignment_are_refused() {
    let arena = Arena::new(1 << 12);
    let mut h = arena.heap();
    assert_eq!(h.alloc(0, 8), Err(AllocError::ZeroSize));
    assert_eq!(h.alloc(8, 0), Err(AllocError::InvalidAlignment));
    assert_eq!(h.alloc(8, 24), Err(AllocError::InvalidAlignment));
    let a = h.alloc(8, 8).unwrap();
    assert_eq!(h.realloc(a, 0), Err(ReallocError::ZeroSize));
    assert_eq!(h.stats().live_allocations, 1);
}

#[test]
fn freed_neighbours_merge_back_into_the_top() {
    let arena = Arena::new(1 << 20);
    let mut h = arena.heap();
    let empty = h.stats();
    let blocks: Vec<u64> = (1..=50).map(|i| h.alloc(i * 37, 16).unwrap()).collect();
    // Free in an order that exercises merging with the previous, the next
    // and both neighbours.
    for i in (0..50).step_by(2).chain((1..50).step_by(2).rev()) {
        h.free(blocks[i]).unwrap();
        h.check_consistency().unwrap();
    }
    assert_eq!(h.stats(), empty);
    // Everything merged: the next allocation starts at the bottom again.
    assert_eq!(h.alloc(5000, 16).unwrap(), HEADER);
}

#[test]
fn small_bins_reuse_the_most_recently_freed_chunk() {
    let arena = Arena::new(1 << 16);
    let mut h = arena.heap();
    let v: Vec<u64> = (0..6).map(|_| h.alloc(40, 16).unwrap()).collect();
    h.free(v[1]).unwrap();
    h.free(v[3]).unwrap();
    assert_eq!(h.alloc(40, 16).unwrap(), v[3]);
    assert_eq!(h.alloc(40, 16).unwrap(), v[1]);
    // A smaller request splits a larger free chunk.
    h.free(v[4]).unwrap();
    let small = h.alloc(8, 16).unwrap();
    assert_eq!(small, v[4]);
    h.check_consistency().unwrap();
}

#[test]
fn large_chunks_are_reused_from_their_bin_or_a_higher_one() {
    let arena = Arena::new(4 << 20);
    let mut h = arena.heap();
    // Free chunks of several large sizes, each between live fences.
    let sizes = [1500u64, 3000, 9000, 100_000, 700_000];
    let mut freed = Vec::new();
    for &size in &sizes {
        let a = h.alloc(size, 16).unwrap();
        let _fence = h.alloc(16, 16).unwrap();
        freed.push(a);
    }
    for &a in &freed {
        h.free(a).unwrap();
    }
    h.check_consistency().unwrap();
    // Same sizes come back at the same offsets (own bin).
    for (&size, &a) in sizes.iter().zip(&freed).rev() {
        assert_eq!(h.alloc(size, 16).unwrap(), a, "{size}");
    }
    for &a in &freed {
        h.free(a).unwrap();
    }
    // 50 000 bytes: its bin is empty, the next non-empty one holds the
    // 100 000-byte chunk, which is split.
    assert_eq!(h.alloc(50_000, 16).unwrap(), freed[3]);
    let rest = h.alloc(40_000, 16).unwrap();
    assert!(rest > freed[3] && rest < freed[4], "{rest}");
    h.check_consistency().unwrap();
}

#[test]
fn large_alignments_are_honoured() {
    let arena = Arena::new(8 << 20);
    let mut h = arena.heap();
    let _pad = h.alloc(24, 16).unwrap();
    for align in [32u64, 64, 256, 4096, 1 << 16, 1 << 20] {
        let a = h.alloc(100, align).unwrap();
        assert_eq!(a % align, 0, "align {align}");
        h.check_consistency().unwrap();
    }
    // The lead gaps went to the bins and are used again.
    let before = h.stats().used_bytes;
    let x = h.alloc(200, 16).unwrap();
    assert!(x < 1 << 20, "{x} should come from a lead gap");
    assert!(h.stats().used_bytes > before);
    h.check_consistency().unwrap();
}

#[test]
fn realloc_grows_in_place_into_the_top_and_into_a_free_neighbour() {
    let arena = Arena::new(1 << 20);
    let mut h = arena.heap();
    let a = h.alloc(100, 16).unwrap();
    arena.fill(a, 100, 0xA1);
    // Next to the top: grows where it is.
    assert_eq!(h.realloc(a, 5000).unwrap(), a);
    assert!(arena.all_equal(a, 100, 0xA1));
    let b = h.alloc(64, 16).unwrap();
    let c = h.alloc(64, 16).unwrap();
    h.free(c).unwrap();
    let _d = h.alloc(64, 16).unwrap();
    // `c` was reused; free it again and grow `b` into it.
    h.free(c).unwrap();
    arena.fill(b, 64, 0xB2);
    assert_eq!(h.realloc(b, 100).unwrap(), b);
    assert!(arena.all_equal(b, 64, 0xB2));
    h.check_consistency().unwrap();
    // Shrinking keeps the offset and the prefix.
    assert_eq!(h.realloc(a, 10).unwrap(), a);
    assert!(arena.all_equal(a, 10, 0xA1));
    h.check_consistency().unwrap();
}

#[test]
fn realloc_that_must_move_copies_and_frees_the_old_block() {
    let arena = Arena::new(1 << 20);
    let mut h = arena.heap();
    let a = h.alloc(300, 16).unwrap();
    let _fence = h.alloc(16, 16).unwrap();
    arena.fill(a, 300, 0x5C);
    let b = h.realloc(a, 3000).unwrap();
    assert_ne!(a, b);
    assert!(arena.all_equal(b, 300, 0x5C));
    assert_eq!(h.free(a), Err(FreeError::NotLive(a)));
    assert_eq!(h.stats().live_allocations, 2);
    h.check_consistency().unwrap();
}

#[test]
fn exhaustion_changes_nothing_and_the_heap_recovers() {
    let arena = Arena::new(1 << 16);
    let mut h = arena.heap();
    let mut live = Vec::new();
    while let Ok(o) = h.alloc(1000, 16) {
        live.push(o);
    }
    assert!(live.len() >= 60, "{}", live.len());
    let full = h.stats();
    assert_eq!(h.alloc(1000, 16), Err(AllocError::OutOfMemory));
    assert_eq!(h.alloc(1 << 40, 4096), Err(AllocError::OutOfMemory));
    assert_eq!(h.alloc(u64::MAX, 16), Err(AllocError::OutOfMemory));
    arena.fill(live[0], 1000, 9);
    assert_eq!(h.realloc(live[0], 1 << 20), Err(ReallocError::OutOfMemory));
    assert!(arena.all_equal(live[0], 1000, 9));
    assert_eq!(h.stats(), full);
    h.check_consistency().unwrap();
    h.free(live[5]).unwrap();
    assert_eq!(h.alloc(900, 16).unwrap(), live[5]);
    for o in live {
        h.free(o).unwrap();
    }
    assert_eq!(h.stats().used_bytes, 0);
    h.check_consistency().unwrap();
}

#[test]
fn offsets_that_are_not_live_are_refused_without_change() {
    let arena = Arena::new(1 << 16);
    let mut h = arena.heap();
    let a = h.alloc(100, 16).unwrap();
    let b = h.alloc(100, 16).unwrap();
    let before = h.stats();
    for bad in [0, 8, a + 16, a + 1, b + 4096, 1 << 40, u64::MAX] {
        assert_eq!(h.free(bad), Err(FreeError::NotLive(bad)), "{bad}");
        assert_eq!(h.realloc(bad, 10), Err(ReallocError::NotLive(bad)));
    }
    h.free(a).unwrap();
    assert_eq!(h.free(a), Err(FreeError::NotLive(a)));
    assert_eq!(h.stats().live_allocations, before.live_allocations - 1);
    h.check_consistency().unwrap();
}

#[test]
fn a_smashed_header_is_reported_and_the_heap_stops() {
    let arena = Arena::new(1 << 16);
    let mut h = arena.heap();
    let a = h.alloc(64, 16).unwrap();
    let b = h.alloc(64, 16).unwrap();
    // Overrun `a` into `b`'s header.
    arena.fill(a, 64 + HEADER, 0xFF);
    match h.free(b) {
        Err(FreeError::Corrupted(c)) => assert_eq!(c.offset, b - HEADER),
        other => panic!("expected corruption, got {other:?}"),
    }
    assert!(matches!(h.alloc(8, 8), Err(AllocError::Corrupted(_))));
    assert!(h.check_consistency().is_err());
}

#[test]
fn the_same_calls_give_the_same_offsets_in_two_heaps() {
    let run = |arena: &Arena| -> Vec<u64> {
        let mut h = arena.heap();
        let mut rng = XorShift(0xC0FFEE);
        let mut live: Vec<u64> = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..3000 {
            let r = rng.next();
            if live.is_empty() || r % 3 != 0 {
                let size = 1 + rng.next() % 5000;
                let align = 1 << (rng.next() % 13);
                if let Ok(o) = h.alloc(size, align) {
                    live.push(o);
                    seen.push(o);
                }
            } else {
                let i = (rng.next() % live.len() as u64) as usize;
                let o = live.swap_remove(i);
                if r % 2 == 0 {
                    h.free(o).unwrap();
                } else if let Ok(n) = h.realloc(o, 1 + rng.next() % 9000) {
                    live.push(n);
                    seen.push(n);
                } else {
                    live.push(o);
                }
            }
        }
        seen
    };
    let (one, two) = (Arena::new(4 << 20), Arena::new(4 << 20));
    let a = run(&one);
    assert!(a.len() > 2000);
    assert_eq!(a, run(&two));
}

/// A live block in the model: payload offset, size asked for, fill byte.
#[derive(Clone, Copy, Debug)]
struct Block {
    at: u64,
    size: u64,
    byte: u8,
}

fn check_model(arena: &Arena, h: &PtHeap, live: &[Block], heap_len: u64) {
    let mut sorted = live.to_vec();
    sorted.sort_by_key(|b| b.at);
    for w in sorted.windows(2) {
        assert!(w[0].at + w[0].size <= w[1].at, "{w:?} overlap");
    }
    for b in &sorted {
        assert!(b.at + b.size <= heap_len);
        assert!(h.usable_size(b.at).is_some_and(|u| u >= b.size));
        assert!(arena.all_equal(b.at, b.size, b.byte), "{b:?} contents");
    }
    assert_eq!(h.stats().live_allocations, live.len() as u64);
    h.check_consistency().unwrap();
}

#[test]
fn random_calls_keep_blocks_disjoint_and_contents_intact() {
    const LEN: u64 = 2 << 20;
    let arena = Arena::new(LEN as usize);
    let mut h = arena.heap();
    let mut rng = XorShift(0x1234_5678_9abc);
    let mut live: Vec<Block> = Vec::new();
    let mut byte = 0u8;
    for step in 0..20_000u32 {
        let r = rng.next() % 10;
        byte = byte.wrapping_add(1);
        if live.is_empty() || r < 5 {
            // Mostly small, sometimes large, sometimes aligned.
            let size = match rng.next() % 8 {
                0 => 1 + rng.next() % 60_000,
                1..=3 => 1 + rng.next() % 2000,
                _ => 1 + rng.next() % 200,
            };
            let align = if rng.next() % 6 == 0 {
                1 << (rng.next() % 16)
            } else {
                16
            };
            match h.alloc(size, align) {
                Ok(at) => {
                    assert_eq!(at % align, 0);
                    arena.fill(at, size, byte);
                    live.push(Block { at, size, byte });
                }
                Err(AllocError::OutOfMemory) => {}
                Err(e) => panic!("step {step}: {e}"),
            }
        } else {
            let i = (rng.next() % live.len() as u64) as usize;
            let b = live.swap_remove(i);
            if r < 8 {
                h.free(b.at).unwrap();
            } else {
                let size = 1 + rng.next() % 20_000;
                match h.realloc(b.at, size) {
                    Ok(at) => {
                        let kept = b.size.min(size);
                        assert!(
                            arena.all_equal(at, kept, b.byte),
                            "step {step}: realloc lost data"
                        );
                        arena.fill(at, size, byte);
                        live.push(Block { at, size, byte });
                    }
                    Err(ReallocError::OutOfMemory) => live.push(b),
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
        }
        if step % 500 == 0 {
            check_model(&arena, &h, &live, LEN);
        }
    }
    check_model(&arena, &h, &live, LEN);
    for b in live.drain(..) {
        h.free(b.at).unwrap();
    }
    let s = h.stats();
    assert_eq!((s.used_bytes, s.live_allocations), (0, 0));
    assert_eq!(s.largest_free, LEN - HEADER);
    h.check_consistency().unwrap();
}

#[test]
fn the_module_maps_errors_to_interface_kinds() {
    let arena = Arena::new(1 << 16);
    let mut m = <PtmallocComponent as MemheapComponentImpl>::open(fake_host()).unwrap();
    assert_eq!(m.alloc(8, 8).unwrap_err().kind, ErrorKind::NOT_READY);
    m.init(arena.segment()).unwrap();
    assert_eq!(
        m.init(arena.segment()).unwrap_err().kind,
        ErrorKind::NOT_READY
    );
    let a = m.alloc(100, 64).unwrap();
    assert_eq!(a % 64, 0);
    assert_eq!(m.alloc(0, 8).unwrap_err().kind, ErrorKind::INVALID_ARGUMENT);
    assert_eq!(
        m.alloc(1 << 20, 8).unwrap_err().kind,
        ErrorKind::RESOURCE_EXHAUSTED
    );
    m.free(a).unwrap();
    assert_eq!(m.free(a).unwrap_err().kind, ErrorKind::INVALID_ARGUMENT);
    let s = m.stats().unwrap();
    assert_eq!(
        (s.heap_size, s.used_bytes, s.live_allocations),
        (1 << 16, 0, 0)
    );
    assert_eq!(s.largest_free, (1 << 16) - HEADER);
}

/// Host services with no parameters, for calling `open` directly.
fn fake_host() -> fireopal_abi::host::Host {
    use abi_stable::std_types::{ROption, RStr};
    use fireopal_abi::host::{HostServices, JobInfo, LogLevel, JOB_KEY_LEN};
    use fireopal_abi::param::ParamValue;

    #[derive(Clone)]
    struct NoParams;
    impl HostServices for NoParams {
        fn param(&self, _name: RStr<'_>) -> ROption<ParamValue> {
            ROption::RNone
        }
        fn job(&self) -> JobInfo {
            JobInfo {
                rank: 0,
                size: 1,
                local_rank: 0,
                local_size: 1,
                job_key: [0; JOB_KEY_LEN],
            }
        }
        fn log(&self, _level: LogLevel, _message: RStr<'_>) {}
    }
    fireopal_abi::host::Host::from_impl(NoParams)
}
