//! The registration cache must not hold its index lock across an
//! allocation, a free or a backend call: a memory hook may fire inside any
//! of them and call `invalidate`, which takes that lock.
//!
//! This test installs a global allocator that calls `invalidate` on every
//! allocation and free of the workload thread, and a backend that calls it
//! from inside `register` and `deregister`. Were the lock held across any of
//! those, the thread would spin on its own lock; the test then fails on a
//! timeout instead of hanging.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

use fireopal_core::regcache::{Access, RegCache, RegCacheConfig, Region, RegistrationBackend};

const PAGE: usize = 4096;
/// What the hook invalidates: never registered by the workload, so hooks do
/// not disturb it, but every hook takes the index write lock.
const HOOK_ADDR: usize = 0x7fff_0000_0000;

static CACHE: OnceLock<RegCache<HookedBackend>> = OnceLock::new();
static HOOKS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static WATCHED: Cell<bool> = const { Cell::new(false) };
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// What a memory monitor does when memory is returned to the system.
fn memory_hook() {
    let _ = WATCHED.try_with(|watched| {
        if watched.get() && !IN_HOOK.get() {
            IN_HOOK.set(true);
            if let Some(cache) = CACHE.get() {
                cache.invalidate(HOOK_ADDR, PAGE);
                HOOKS.fetch_add(1, Ordering::Relaxed);
            }
            IN_HOOK.set(false);
        }
    });
}

struct HookedAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged; the
// hook runs before and never touches the block.
unsafe impl GlobalAlloc for HookedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        memory_hook();
        // SAFETY: the caller upholds `alloc`'s contract, which we forward.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        memory_hook();
        // SAFETY: `ptr` was returned by `System.alloc` (through `alloc`
        // above, or the default `realloc`) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: HookedAlloc = HookedAlloc;

/// A backend with no locks of its own that fires the hook in both calls.
struct HookedBackend;

/// Calls seen by every `HookedBackend`.
static COUNTS: HookedCounts = HookedCounts {
    registered: AtomicUsize::new(0),
    deregistered: AtomicUsize::new(0),
};

struct HookedCounts {
    registered: AtomicUsize,
    deregistered: AtomicUsize,
}

impl RegistrationBackend for HookedBackend {
    type Handle = usize;
    type Error = Infallible;

    fn register(&self, region: Region, _access: Access) -> Result<usize, Infallible> {
        memory_hook();
        COUNTS.registered.fetch_add(1, Ordering::Relaxed);
        Ok(region.base())
    }

    fn deregister(&self, _region: Region, _handle: &usize) {
        memory_hook();
        COUNTS.deregistered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every public operation, with enough distinct ranges to grow the index
/// storage several times and the LRU queue past its compaction point.
fn workload(cache: &RegCache<HookedBackend>) {
    let mut transports = vec![cache.add_transport(HookedBackend).expect("transport")];
    let mut held = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..6000usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = (x % 3000) as usize;
        let addr = 0x1000_0000 + page * PAGE + (x >> 32) as usize % PAGE;
        let len = 1 + (x >> 40) as usize % (2 * PAGE);
        let t = transports[i % transports.len()];
        let reg = cache.get(addr, len, Access::REMOTE_READ, t).expect("get");
        // Hit it again.
        let again = cache.get(addr, 1, Access::LOCAL_READ, t).expect("hit");
        cache.put(again);
        if x % 4 == 0 {
            held.push(reg);
        } else {
            cache.put(reg);
        }
        if held.len() > 40 {
            held.truncate(10);
        }
        match i % 500 {
            100 => {
                assert!(cache.invalidate(0x1000_0000 + page * PAGE, 64 * PAGE) <= 64 * 2 + 1);
            }
            200 => cache.set_limits(50, 400 * PAGE),
            300 => cache.set_limits(usize::MAX, usize::MAX),
            400 => {
                let seen = cache.find_overlapping(0x1000_0000, 3000 * PAGE);
                assert!(seen.len() <= cache.stats().live_count);
            }
            450 if transports.len() < 4 => {
                transports.push(cache.add_transport(HookedBackend).expect("transport"));
            }
            _ => {}
        }
    }
    drop(held);
    cache.invalidate(0, usize::MAX);
}

#[test]
fn no_lock_is_held_across_allocation_free_or_backend_call() {
    let config = RegCacheConfig {
        max_count: 1000,
        ..RegCacheConfig::default()
    };
    let cache = CACHE.get_or_init(|| RegCache::new(config).expect("config"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        WATCHED.set(true);
        workload(cache);
        WATCHED.set(false);
        let _ = tx.send(());
    });
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        panic!("the workload thread is stuck: a memory hook could not take the index lock");
    }
    // The hook really ran, many times, on every path.
    assert!(HOOKS.load(Ordering::Relaxed) > 10_000);
    let s = cache.stats();
    assert_eq!(s.live_count, 0);
    assert_eq!(
        COUNTS.registered.load(Ordering::Relaxed),
        COUNTS.deregistered.load(Ordering::Relaxed)
    );
    assert!(s.hits >= 6000 && s.misses > 1000 && s.evictions > 0 && s.merges > 0);
}
