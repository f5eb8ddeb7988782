//! One test per case the registration cache must handle.

mod regcache_common;

use fireopal_core::regcache::{
    Access, ConfigError, GetError, RegCache, RegCacheConfig, Registration, RegistrationBackend,
    TransportId,
};
use regcache_common::{FailMode, Recorder};

const PAGE: usize = 4096;
const RR: Access = Access::REMOTE_READ;

fn cache_with(config: RegCacheConfig) -> (RegCache<Recorder>, Recorder, TransportId) {
    let cache = RegCache::new(config).expect("valid config");
    let rec = Recorder::new();
    let t = cache.add_transport(rec.clone()).expect("transport");
    (cache, rec, t)
}

fn cache() -> (RegCache<Recorder>, Recorder, TransportId) {
    cache_with(RegCacheConfig::default())
}

/// A cache whose misses register exactly the rounded range.
fn cache_without_merging() -> (RegCache<Recorder>, Recorder, TransportId) {
    cache_with(RegCacheConfig {
        merge: false,
        ..RegCacheConfig::default()
    })
}

fn get(
    cache: &RegCache<Recorder>,
    addr: usize,
    len: usize,
    t: TransportId,
) -> Registration<Recorder> {
    cache.get(addr, len, RR, t).expect("get")
}

#[test]
fn same_range_twice_is_one_registration_with_two_references() {
    let (cache, rec, t) = cache();
    let a = get(&cache, 0x10_0000, 3 * PAGE, t);
    let b = get(&cache, 0x10_0000, 3 * PAGE, t);
    assert_eq!(a.id(), b.id());
    assert_eq!(rec.registered(), 1);
    let info = cache.find_overlapping(0x10_0000, 1);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].refs, 2);
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.live_count), (1, 1, 1));
    cache.put(a);
    assert_eq!(cache.find_overlapping(0x10_0000, 1)[0].refs, 1);
    cache.put(b);
    assert_eq!(cache.find_overlapping(0x10_0000, 1)[0].refs, 0);
    // Leave-pinned: still registered.
    assert_eq!(rec.deregistered(), 0);
}

#[test]
fn sub_range_is_a_hit() {
    let (cache, rec, t) = cache();
    let whole = get(&cache, 0x20_0000 + 100, 4 * PAGE, t);
    assert_eq!(whole.region().base(), 0x20_0000);
    assert_eq!(whole.region().len(), 5 * PAGE);
    let part = get(&cache, 0x20_0000 + PAGE + 7, 2 * PAGE, t);
    assert_eq!(part.id(), whole.id());
    // Less access than registered is served too.
    let weaker = cache.get(0x20_0000, 1, Access::LOCAL_READ, t).expect("get");
    assert_eq!(weaker.id(), whole.id());
    // More access is not.
    let stronger = cache
        .get(0x20_0000, 1, RR | Access::REMOTE_WRITE, t)
        .expect("get");
    assert_ne!(stronger.id(), whole.id());
    assert!(stronger.access().contains(Access::REMOTE_WRITE));
    assert_eq!(rec.registered(), 2);
    assert_eq!(cache.stats().hits, 2);
}

#[test]
fn range_spanning_two_idle_registrations_with_a_gap_merges_them() {
    let (cache, rec, t) = cache();
    let a = get(&cache, 0x30_0000, PAGE, t);
    let b = get(&cache, 0x30_0000 + 3 * PAGE, PAGE, t);
    let (ida, idb) = (a.id(), b.id());
    cache.put(a);
    cache.put(b);
    // From the middle of the first to the middle of the second.
    let span = get(&cache, 0x30_0000 + PAGE / 2, 3 * PAGE, t);
    assert!(span.id() != ida && span.id() != idb);
    assert_eq!(span.region().base(), 0x30_0000);
    assert_eq!(span.region().len(), 4 * PAGE);
    // The two idle ones were swallowed and deregistered.
    assert_eq!(rec.registered(), 3);
    assert_eq!(rec.deregistered(), 2);
    assert_eq!(cache.stats().merges, 2);
    let all = cache.find_overlapping(0x30_0000, 4 * PAGE);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].id, span.id());
}

#[test]
fn range_spanning_two_registrations_in_use_gets_its_own() {
    let (cache, rec, t) = cache();
    let a = get(&cache, 0x30_0000, PAGE, t);
    let b = get(&cache, 0x30_0000 + 3 * PAGE, PAGE, t);
    let span = get(&cache, 0x30_0000 + PAGE / 2, 3 * PAGE, t);
    // Neither covers the range, neither may be merged (in use): a new one,
    // rounded to the pages of the request only.
    assert_eq!(span.region().base(), 0x30_0000);
    assert_eq!(span.region().len(), 4 * PAGE);
    assert_eq!(rec.registered(), 3);
    assert_eq!(rec.deregistered(), 0);
    assert_eq!(cache.find_overlapping(0x30_0000, 4 * PAGE).len(), 3);
    drop((a, b, span));
}

#[test]
fn merging_off_registers_the_plain_range() {
    let (cache, rec, t) = cache_without_merging();
    cache.put(get(&cache, 0x30_0000, PAGE, t));
    cache.put(get(&cache, 0x30_0000 + 2 * PAGE, PAGE, t));
    let span = get(&cache, 0x30_0000 + PAGE / 2, 2 * PAGE, t);
    assert_eq!(span.region().base(), 0x30_0000);
    assert_eq!(span.region().len(), 3 * PAGE);
    assert_eq!(rec.deregistered(), 0);
    assert_eq!(cache.stats().merges, 0);
}

#[test]
fn identical_ranges_for_two_transports_are_separate() {
    let cache = RegCache::default();
    let (r1, r2) = (Recorder::new(), Recorder::new());
    let t1 = cache.add_transport(r1.clone()).expect("t1");
    let t2 = cache.add_transport(r2.clone()).expect("t2");
    let a = cache.get(0x40_0000, PAGE, RR, t1).expect("get");
    let b = cache.get(0x40_0000, PAGE, RR, t2).expect("get");
    assert_ne!(a.id(), b.id());
    assert_eq!((a.transport(), b.transport()), (t1, t2));
    assert_eq!((r1.registered(), r2.registered()), (1, 1));
    // Each hits its own.
    assert_eq!(cache.get(0x40_0000, 8, RR, t1).expect("get").id(), a.id());
    assert_eq!(cache.get(0x40_0000, 8, RR, t2).expect("get").id(), b.id());
    // Idle neighbours of the other transport are never merged.
    cache.put(b);
    let c = cache.get(0x40_0000 + PAGE, PAGE, RR, t1).expect("get");
    assert_eq!(c.region().len(), PAGE);
    assert_eq!(r2.deregistered(), 0);
    assert_eq!(cache.find_overlapping(0x40_0000, 2 * PAGE).len(), 3);
}

#[test]
fn invalidating_part_of_an_in_use_registration_defers_deregistration() {
    let (cache, rec, t) = cache();
    let a = get(&cache, 0x50_0000, 8 * PAGE, t);
    let a2 = get(&cache, 0x50_0000, PAGE, t);
    let old = a.id();
    let handle = *a.handle();
    assert_eq!(cache.invalidate(0x50_0000 + 3 * PAGE, 10), 1);
    // Gone from the index, still registered while in use.
    assert!(cache.find_overlapping(0x50_0000, 8 * PAGE).is_empty());
    assert!(rec.is_live(handle));
    let s = cache.stats();
    assert_eq!((s.invalidations, s.live_count), (1, 1));
    // Never returned again: the same range makes a new registration.
    let b = get(&cache, 0x50_0000, 8 * PAGE, t);
    assert_ne!(b.id(), old);
    assert_eq!(rec.registered(), 2);
    cache.put(a);
    assert!(rec.is_live(handle), "released before the last put");
    cache.put(a2);
    assert!(!rec.is_live(handle), "not released at the last put");
    assert_eq!(cache.stats().live_count, 1);
    assert_eq!(rec.log().bad_deregistrations, Vec::<u64>::new());
    drop(b);
}

#[test]
fn invalidate_touching_more_than_a_hundred_registrations() {
    let (cache, rec, t) = cache_without_merging();
    let base = 0x100_0000;
    let mut held = Vec::new();
    for i in 0..150 {
        let reg = get(&cache, base + i * PAGE, PAGE, t);
        if i % 3 == 0 {
            held.push(reg);
        } else {
            cache.put(reg);
        }
    }
    // Outside the range: untouched.
    let outside = get(&cache, base + 200 * PAGE, PAGE, t);
    assert_eq!(cache.invalidate(base, 150 * PAGE), 150);
    assert_eq!(cache.cached_count(), 1);
    assert_eq!(cache.find_overlapping(base, 150 * PAGE).len(), 0);
    // The 100 idle ones are deregistered now, the 50 in use later.
    assert_eq!(rec.deregistered(), 100);
    assert_eq!(cache.stats().invalidations, 150);
    let ids: Vec<u64> = held.iter().map(Registration::id).collect();
    for i in 0..150 {
        let again = get(&cache, base + i * PAGE, PAGE, t);
        assert!(!ids.contains(&again.id()));
    }
    drop(held);
    assert_eq!(rec.deregistered(), 150);
    drop(outside);
}

#[test]
fn zero_length_is_a_clear_error() {
    let (cache, rec, t) = cache();
    let err = cache.get(0x1000, 0, RR, t).expect_err("zero length");
    assert_eq!(err, GetError::ZeroLength);
    assert!(err.to_string().contains("zero-length"));
    assert_eq!(rec.registered(), 0);
    assert_eq!(cache.invalidate(0x1000, 0), 0);
    assert!(cache.find_overlapping(0x1000, 0).is_empty());
}

#[test]
fn top_of_the_address_space_does_not_overflow() {
    let (cache, rec, t) = cache();
    let top = get(&cache, usize::MAX - 99, 100, t);
    assert_eq!(top.region().last(), usize::MAX);
    assert_eq!(top.region().base(), usize::MAX - PAGE + 1);
    assert_eq!(top.region().len(), PAGE);
    assert_eq!(get(&cache, usize::MAX, 1, t).id(), top.id());
    // Past the end: refused, nothing registered.
    let err = cache.get(usize::MAX, 2, RR, t).expect_err("overflow");
    assert_eq!(err, GetError::AddressOverflow);
    // A whole-address-space request cannot be a region.
    assert_eq!(
        cache.get(0, usize::MAX, RR, t).expect_err("whole space"),
        GetError::AddressOverflow
    );
    // A neighbour just below the top (not merged: the top one is in use).
    cache.put(get(&cache, usize::MAX - 2 * PAGE + 1, 1, t));
    assert_eq!(cache.find_overlapping(usize::MAX - 10, 1000).len(), 1);
    // Invalidate ranges running past the end are clamped.
    assert_eq!(cache.invalidate(usize::MAX - 10, 1000), 1);
    assert_eq!(rec.registered(), 2);
    drop(top);
    assert_eq!(rec.live_count(), 1);
}

#[test]
fn lru_by_count_evicts_oldest_idle_and_never_in_use() {
    let config = RegCacheConfig {
        max_count: 3,
        merge: false,
        ..RegCacheConfig::default()
    };
    let (cache, rec, t) = cache_with(config);
    let at = |i: usize| 0x200_0000 + i * 2 * PAGE;
    let regs: Vec<_> = (0..3).map(|i| get(&cache, at(i), PAGE, t)).collect();
    let ids: Vec<u64> = regs.iter().map(Registration::id).collect();
    for r in regs {
        cache.put(r); // idle in order 0, 1, 2
    }
    // Use 0 again: 1 becomes the least recently used.
    cache.put(get(&cache, at(0), PAGE, t));
    let r3 = get(&cache, at(3), PAGE, t);
    assert_eq!(cache.stats().evictions, 1);
    let left: Vec<u64> = cache
        .find_overlapping(0, usize::MAX)
        .iter()
        .map(|i| i.id)
        .collect();
    assert!(!left.contains(&ids[1]));
    assert!(left.contains(&ids[0]) && left.contains(&ids[2]));
    // Hold four in use with room for three: nothing in use goes.
    let held: Vec<_> = (4..7).map(|i| get(&cache, at(i), PAGE, t)).collect();
    let s = cache.stats();
    assert_eq!(s.live_count, 4);
    assert!(held.iter().all(|r| rec.is_live(*r.handle())));
    assert!(rec.is_live(*r3.handle()));
    // Limits lowered to one: still nothing in use goes.
    cache.set_limits(1, usize::MAX);
    assert_eq!(cache.stats().live_count, 4);
    drop(held);
    // As they become idle they are evicted down to the limit.
    assert_eq!(cache.stats().live_count, 1);
    assert_eq!(rec.live_count(), 1);
    assert!(rec.is_live(*r3.handle()));
}

#[test]
fn eviction_follows_the_order_of_last_puts_over_many_reuses() {
    // Enough reuse that the LRU list drops its stale records many times.
    let (cache, rec, t) = cache_without_merging();
    const N: usize = 200;
    let at = |i: usize| 0x600_0000 + i * 2 * PAGE;
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let r = get(&cache, at(i), PAGE, t);
            let h = *r.handle();
            cache.put(r);
            h
        })
        .collect();
    // Least recently put first.
    let mut order: Vec<usize> = (0..N).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..5000 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let i = (x >> 33) as usize % N;
        cache.put(get(&cache, at(i) + 8, 64, t));
        order.retain(|&j| j != i);
        order.push(i);
    }
    cache.set_limits(N / 2, usize::MAX);
    assert_eq!(cache.stats().evictions, (N / 2) as u64);
    for (k, &i) in order.iter().enumerate() {
        assert_eq!(
            rec.is_live(handles[i]),
            k >= N / 2,
            "registration {i}, {k}th least recently put"
        );
    }
}

#[test]
fn lru_by_bytes_evicts_oldest_idle() {
    let config = RegCacheConfig {
        max_bytes: 10 * PAGE,
        merge: false,
        ..RegCacheConfig::default()
    };
    let (cache, rec, t) = cache_with(config);
    let big = get(&cache, 0x300_0000, 4 * PAGE, t);
    let mid = get(&cache, 0x310_0000, 4 * PAGE, t);
    let (big_h, mid_h) = (*big.handle(), *mid.handle());
    cache.put(big);
    cache.put(mid);
    assert_eq!(cache.stats().live_bytes, 8 * PAGE);
    // 8 + 4 pages is over 10: the oldest idle (big) goes.
    let third = get(&cache, 0x320_0000, 4 * PAGE, t);
    assert!(!rec.is_live(big_h));
    assert!(rec.is_live(mid_h));
    assert_eq!(cache.stats().live_bytes, 8 * PAGE);
    // An in-use registration larger than the limit stays.
    let huge = get(&cache, 0x400_0000, 16 * PAGE, t);
    assert!(rec.is_live(*huge.handle()));
    assert!(rec.is_live(*third.handle()));
    assert!(!rec.is_live(mid_h), "idle one evicted to make room");
    assert_eq!(cache.stats().live_bytes, 20 * PAGE);
    assert_eq!(cache.stats().evictions, 2);
}

#[test]
fn backend_failure_leaves_the_cache_unchanged() {
    let (cache, rec, t) = cache();
    cache.put(get(&cache, 0x500_0000, PAGE, t));
    let held = get(&cache, 0x500_0000 + 4 * PAGE, PAGE, t);
    let before = (cache.find_overlapping(0, usize::MAX), cache.stats());
    rec.set_fail(FailMode::Always);
    let err = cache
        .get(0x500_0000 + PAGE, PAGE, RR, t)
        .expect_err("refused");
    assert!(matches!(err, GetError::Backend(_)));
    assert!(err.to_string().contains("refused"));
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(
        (cache.find_overlapping(0, usize::MAX), cache.stats()),
        before
    );
    assert_eq!(rec.live_count(), 2);
    drop(held);
}

#[test]
fn backend_refusing_a_merged_range_gets_the_plain_one() {
    let (cache, rec, t) = cache();
    cache.put(get(&cache, 0x600_0000, PAGE, t));
    // The adjacent idle page would be merged; the backend refuses more
    // than one page, so the plain page is registered instead.
    rec.set_fail(FailMode::LongerThan(PAGE));
    let reg = get(&cache, 0x600_0000 + PAGE, 10, t);
    assert_eq!(reg.region().base(), 0x600_0000 + PAGE);
    assert_eq!(reg.region().len(), PAGE);
    assert_eq!(rec.live_count(), 2);
    assert_eq!(cache.stats().merges, 0);
}

#[test]
fn page_size_is_a_parameter() {
    let config = RegCacheConfig {
        page_size: 1 << 16,
        ..RegCacheConfig::default()
    };
    let (cache, _rec, t) = cache_with(config);
    assert_eq!(cache.page_size(), 1 << 16);
    let r = get(&cache, 0x12_3456, 10, t);
    assert_eq!(r.region().base(), 0x12_0000);
    assert_eq!(r.region().len(), 1 << 16);
    assert_eq!(
        RegCache::<Recorder>::new(RegCacheConfig {
            page_size: 3000,
            ..RegCacheConfig::default()
        })
        .map(|_| ())
        .expect_err("not a power of two"),
        ConfigError::BadPageSize(3000)
    );
}

#[test]
fn unknown_transport_is_an_error() {
    let (cache, _rec, _t) = cache();
    let other = RegCache::<Recorder>::default();
    let t0 = other.add_transport(Recorder::new()).expect("t");
    let t1 = other.add_transport(Recorder::new()).expect("t");
    assert_eq!(t1.index(), 1);
    assert_eq!(cache.get(0, 1, RR, t0).map(|r| r.id()).ok(), Some(1));
    assert_eq!(
        cache.get(0, 1, RR, t1).map(|r| r.id()),
        Err(GetError::UnknownTransport(t1))
    );
}

#[test]
fn dropping_the_cache_deregisters_idle_now_and_in_use_at_last_put() {
    let (cache, rec, t) = cache();
    cache.put(get(&cache, 0x700_0000, PAGE, t));
    let held = get(&cache, 0x710_0000, PAGE, t);
    drop(cache);
    assert_eq!(rec.deregistered(), 1);
    assert!(rec.is_live(*held.handle()));
    drop(held);
    assert_eq!(rec.registered(), rec.deregistered());
}

/// Runs `workers` threads of `work(worker, meet)` against one more thread
/// that calls `invalidate(i)` (which answers what `RegCache::invalidate`
/// does) for i = 0, 1, ... until every worker is done, and at most ten
/// million times, so that a worker's panic cannot hang it.
///
/// A worker calls `meet()` between batches of its operations: it returns
/// once the invalidating thread has swept every one of the 64 page slots
/// after the call began. So invalidations meet the worker's registrations
/// however the threads are scheduled, even when other work keeps every core
/// busy and the invalidating thread would otherwise start after the workers
/// finish.
fn race_with_invalidations(
    workers: usize,
    work: impl Fn(u64, &dyn Fn()) + Sync,
    invalidate: impl Fn(usize) -> usize + Sync,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const SLOTS: usize = 64;
    let done = AtomicUsize::new(0);
    let sweeps = AtomicUsize::new(0);
    let stopped = AtomicBool::new(false);
    let meet = || {
        // Two more sweeps started means one whole sweep began after now.
        let target = sweeps.load(Ordering::Acquire) + 2;
        let mut polls = 0u64;
        while sweeps.load(Ordering::Acquire) < target && !stopped.load(Ordering::Acquire) {
            polls += 1;
            assert!(polls < 1 << 28, "the invalidating thread made no progress");
            std::thread::yield_now();
        }
    };
    std::thread::scope(|s| {
        for w in 0..workers as u64 {
            let (work, done, meet) = (&work, &done, &meet);
            s.spawn(move || {
                work(w, meet);
                done.fetch_add(1, Ordering::Release);
            });
        }
        let (invalidate, done, sweeps, stopped) = (&invalidate, &done, &sweeps, &stopped);
        s.spawn(move || {
            let mut i = 0usize;
            while done.load(Ordering::Acquire) < workers && i < 10_000_000 {
                invalidate(i);
                i += 1;
                if i % SLOTS == 0 {
                    sweeps.fetch_add(1, Ordering::Release);
                }
            }
            stopped.store(true, Ordering::Release);
        });
    });
}

/// The next number of a xorshift sequence.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn concurrent_gets_puts_and_invalidations_balance() {
    let config = RegCacheConfig {
        max_count: 40,
        ..RegCacheConfig::default()
    };
    let (cache, rec, t) = cache_with(config);
    race_with_invalidations(
        3,
        |w, meet| {
            let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ (w + 1);
            for n in 0..20_000 {
                if n % 2_000 == 1_000 {
                    meet();
                }
                let x = xorshift(&mut x);
                let page = (x % 64) as usize;
                let len = 1 + (x >> 8) as usize % (3 * PAGE);
                let addr = 0x800_0000 + page * PAGE + (x >> 20) as usize % PAGE;
                match cache.get(addr, len, RR, t) {
                    Ok(reg) => {
                        assert!(reg.region().base() <= addr);
                        assert!(reg.region().last() >= addr + len - 1);
                        assert!(rec.is_live(*reg.handle()));
                        cache.put(reg);
                    }
                    Err(GetError::InvalidatedDuringRegistration) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        },
        |i| cache.invalidate(0x800_0000 + (i % 64) * PAGE, PAGE),
    );
    assert!(rec.log().bad_deregistrations.is_empty());
    assert_eq!(rec.live_count(), cache.stats().live_count);
    eprintln!("{:?}", cache.stats());
    assert!(cache.stats().invalidations > 0);
    drop(cache);
    assert_eq!(rec.registered(), rec.deregistered());
}

#[test]
fn registrations_held_across_threads_survive_invalidation_and_eviction() {
    let config = RegCacheConfig {
        max_count: 24,
        merge: false,
        ..RegCacheConfig::default()
    };
    let (cache, rec, t) = cache_with(config);
    race_with_invalidations(
        2,
        |w, meet| {
            // Each worker holds up to eight references at a time, taken at
            // the first page of 32 one-page registrations (the home table's
            // path), so invalidations and evictions meet entries in use.
            let mut held: Vec<Registration<Recorder>> = Vec::with_capacity(8);
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (w + 1);
            for n in 0..20_000 {
                if n % 2_000 == 1_000 {
                    meet();
                }
                let x = xorshift(&mut x);
                let addr = 0x900_0000 + (x % 32) as usize * PAGE + (x >> 40) as usize % 64;
                match cache.get(addr, 8, RR, t) {
                    Ok(reg) => {
                        assert!(reg.region().base() <= addr);
                        assert!(rec.is_live(*reg.handle()));
                        if held.len() == held.capacity() {
                            let victim = (x >> 20) as usize % held.len();
                            cache.put(held.swap_remove(victim));
                        }
                        held.push(reg);
                    }
                    Err(GetError::InvalidatedDuringRegistration) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
                for reg in &held {
                    assert!(rec.is_live(*reg.handle()), "held registration deregistered");
                }
            }
        },
        |i| cache.invalidate(0x900_0000 + (i % 32) * PAGE, 1 + (i % 3) * PAGE),
    );
    assert!(rec.log().bad_deregistrations.is_empty());
    let s = cache.stats();
    assert_eq!(rec.live_count(), s.live_count);
    eprintln!("{s:?}");
    assert!(s.invalidations > 0 && s.hits > 0);
    drop(cache);
    assert_eq!(rec.registered(), rec.deregistered());
}

#[test]
fn hits_stay_counted_past_the_home_slots_own_counter() {
    // A home slot counts hits in 16 bits and hands them to the cache-wide
    // counter every 2^15: well past that, every hit is still counted once.
    let (cache, _rec, t) = cache();
    cache.put(get(&cache, 0x30_0000, PAGE, t));
    const HITS: u64 = 70_000;
    for _ in 0..HITS {
        cache.put(get(&cache, 0x30_0000 + 8, 64, t));
    }
    let s = cache.stats();
    assert_eq!((s.hits, s.misses), (HITS, 1));
    assert_eq!(cache.find_overlapping(0x30_0000, 1)[0].refs, 0);
}

#[test]
fn too_many_references_are_refused_and_nothing_changes() {
    let (cache, rec, t) = cache();
    // 2^23 references are the most one registration holds.
    let held: Vec<Registration<Recorder>> = (0..1 << 23)
        .map(|_| get(&cache, 0x40_0000, 64, t))
        .collect();
    let before = cache.stats();
    assert_eq!(
        cache.get(0x40_0000, 64, RR, t).map(|r| r.id()),
        Err(GetError::TooManyReferences)
    );
    assert_eq!(cache.stats(), before);
    assert_eq!(cache.find_overlapping(0x40_0000, 1)[0].refs, 1 << 23);
    assert_eq!(rec.registered(), 1);
    drop(held);
    assert_eq!(cache.find_overlapping(0x40_0000, 1)[0].refs, 0);
    assert!(cache.get(0x40_0000, 64, RR, t).is_ok());
}

#[test]
fn get_with_registers_misses_through_the_closure_and_releases_through_the_backend() {
    let (cache, rec, t) = cache_without_merging();
    let mut calls = Vec::new();
    let mut register = |region: fireopal_core::regcache::Region, access: Access| {
        calls.push((region.base(), region.len(), access));
        // Logged as the backend's own, so that its release is checked.
        rec.register(region, access)
    };
    let reg = cache
        .get_with(0x10_0010, 100, RR, t, &mut register)
        .expect("registered by the closure");
    let hit = cache
        .get_with(0x10_0020, 8, RR, t, &mut register)
        .expect("a hit");
    assert_eq!(hit.id(), reg.id());
    assert_eq!(calls, [(0x10_0000, PAGE, RR)], "a hit calls nothing");
    cache.put(hit);
    cache.put(reg);
    assert_eq!(cache.invalidate(0x10_0000, PAGE), 1);
    assert_eq!((rec.registered(), rec.deregistered()), (1, 1));
    assert!(rec.log().bad_deregistrations.is_empty());
}
