//! The messenger's registration cache and its memory monitor in one
//! process, over the `self` transport: memory that leaves the process by
//! `munmap`, `mremap` or `madvise` is registered anew, also when another
//! thread unmaps it; the explicit invalidation; what happens without a
//! monitor; local memory that needs no registration.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use fireopal::btl::Messenger;
use fireopal::memory::MonitorKind;
use fireopal_abi::btl::{Access, MemRegion};

use common::{messenger, monitor_or_skip, register_and_release, self_with, with_monitor};

const LEN: usize = 64 << 10;

/// A new anonymous mapping of `len` bytes.
#[allow(unsafe_code)]
fn map(len: usize) -> usize {
    // SAFETY: a new anonymous mapping where the kernel chooses.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(
        addr,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    addr as usize
}

/// New memory in place of the mapping at `addr`: one `mmap(MAP_FIXED)`,
/// which unmaps the old pages (and is reported as such) and maps new ones
/// with no moment at which another thread of the test process could take
/// the address.
#[allow(unsafe_code)]
fn replace(addr: usize, len: usize) {
    // SAFETY: replaces the callers' own mapping, into which they hold no
    // reference.
    let new = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(new as usize, addr, "{}", std::io::Error::last_os_error());
}

#[allow(unsafe_code)]
fn unmap(addr: usize, len: usize) {
    // SAFETY: the callers own the mapping and hold no reference into it.
    assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, len) }, 0);
}

#[allow(unsafe_code)]
fn region(addr: usize, len: usize) -> MemRegion {
    // SAFETY: the mapping outlives every registration the tests make.
    unsafe { MemRegion::new(addr as *mut u8, len) }
}

#[test]
fn a_released_registration_is_a_hit_until_its_memory_is_unmapped() {
    let (_registry, mut m) = monitor_or_skip!();
    let addr = map(LEN);
    let first = register_and_release(&mut m, addr, LEN);
    assert_eq!(register_and_release(&mut m, addr, LEN), first, "a hit");
    let hits = m.registration_stats().hits;
    assert!(hits >= 1);
    replace(addr, LEN);
    let again = register_and_release(&mut m, addr, LEN);
    assert_ne!(again, first, "memory mapped again is registered again");
    assert!(m.registration_stats().invalidations >= 1);
    unmap(addr, LEN);
}

#[test]
#[allow(unsafe_code)]
fn memory_moved_by_mremap_is_registered_again() {
    let (_registry, mut m) = monitor_or_skip!();
    let addr = map(LEN);
    let first = register_and_release(&mut m, addr, LEN);
    // A free destination, then the move onto it.
    let dest = map(2 * LEN);
    // SAFETY: moves this test's own mapping onto this test's own
    // reservation.
    let moved = unsafe {
        libc::mremap(
            addr as *mut libc::c_void,
            LEN,
            2 * LEN,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            dest as *mut libc::c_void,
        )
    };
    assert_eq!(moved as usize, dest, "{}", std::io::Error::last_os_error());
    let at_dest = register_and_release(&mut m, dest, 2 * LEN);
    assert_ne!(at_dest, first);
    let stats = m.registration_stats();
    assert!(
        stats.invalidations >= 1,
        "the registration at the old address is dropped"
    );
    assert_eq!(
        stats.live_count, 1,
        "only the registration at the new address is left"
    );
    unmap(dest, 2 * LEN);
}

#[test]
#[allow(unsafe_code)]
fn pages_dropped_by_madvise_are_registered_again() {
    let (_registry, mut m) = monitor_or_skip!();
    let addr = map(LEN);
    let first = register_and_release(&mut m, addr, LEN);
    // SAFETY: drops the pages of this test's own mapping.
    let dropped = unsafe { libc::madvise(addr as *mut libc::c_void, LEN, libc::MADV_DONTNEED) };
    assert_eq!(dropped, 0);
    assert_ne!(register_and_release(&mut m, addr, LEN), first);
    unmap(addr, LEN);
}

#[test]
fn an_explicit_invalidation_drops_a_cached_registration() {
    let registry = self_with(&[
        ("FIREOPAL_MEMORY_MONITOR", "none"),
        ("FIREOPAL_RCACHE_LEAVE_PINNED", "always"),
    ]);
    let (mut m, _) = messenger(&registry);
    let addr = map(LEN);
    let first = register_and_release(&mut m, addr, LEN);
    assert_eq!(
        register_and_release(&mut m, addr, LEN),
        first,
        "left cached"
    );
    assert_eq!(m.invalidate_memory(addr + 100, 1), 1);
    assert_ne!(register_and_release(&mut m, addr, LEN), first);
    unmap(addr, LEN);
}

#[test]
fn without_a_monitor_a_registration_lives_while_it_is_held() {
    let registry = self_with(&[("FIREOPAL_MEMORY_MONITOR", "none")]);
    let (mut m, _) = messenger(&registry);
    assert_eq!(m.memory_monitor().active, MonitorKind::None);
    let addr = map(LEN);
    let held = m
        .register_memory(0, region(addr, LEN), Access::REMOTE_READ)
        .expect("register");
    let again = m
        .register_memory(0, region(addr, LEN), Access::REMOTE_READ)
        .expect("register");
    assert_eq!(held.cache_id(), again.cache_id(), "shared while held");
    m.deregister_memory(again).expect("release");
    assert_eq!(m.registration_stats().live_count, 1);
    m.deregister_memory(held).expect("release");
    assert_eq!(
        m.registration_stats().live_count,
        0,
        "released at its last use"
    );
    unmap(addr, LEN);
}

#[test]
fn local_memory_needs_no_registration_on_transports_that_say_so() {
    let registry = self_with(&[]);
    let (mut m, _) = messenger(&registry);
    let addr = map(LEN);
    let local = m
        .register_memory(0, region(addr, LEN), Access::LOCAL_WRITE)
        .expect("register");
    assert_eq!(local.registered_region(), None);
    assert!(local.remote_key().is_empty());
    m.deregister_memory(local).expect("release");
    let stats = m.registration_stats();
    assert_eq!((stats.hits, stats.misses), (0, 0), "the cache was not used");
    unmap(addr, LEN);
}

#[test]
fn bad_parameter_values_are_init_errors() {
    for (name, value) in [
        ("FIREOPAL_MEMORY_MONITOR", "hooks"),
        ("FIREOPAL_RCACHE_LEAVE_PINNED", "sometimes"),
    ] {
        let registry = self_with(&[(name, value)]);
        let mut exchange = common::OwnExchange::default();
        let err = Messenger::init(&registry, &mut exchange).expect_err(value);
        assert!(err.to_string().contains(value), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }
}

/// Another thread unmaps and maps again the buffers the messenger's
/// thread registers, one at a time (each step handed over through
/// channels, so the order is forced); every buffer is registered anew,
/// never served its old registration. A third thread allocates and frees
/// throughout. The whole runs under a deadline.
#[test]
fn buffers_unmapped_by_another_thread_are_registered_again() {
    drop(monitor_or_skip!());
    const BUFFERS: usize = 8;
    const ROUNDS: usize = 40;
    let (done_tx, done_rx) = mpsc::channel();
    let messenger_thread = std::thread::spawn(move || {
        let (_registry, mut m) = with_monitor();
        let buffers: Vec<usize> = (0..BUFFERS).map(|_| map(LEN)).collect();
        let (unmap_tx, unmap_rx) = mpsc::channel::<usize>();
        let (remapped_tx, remapped_rx) = mpsc::channel::<()>();
        let unmapper = std::thread::spawn(move || {
            for addr in unmap_rx {
                replace(addr, LEN);
                if remapped_tx.send(()).is_err() {
                    return;
                }
            }
        });
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let allocator = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                for i in 0..100_000usize {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    kept.push(vec![i as u8; 1 + (i * 7919) % (256 << 10)]);
                    if kept.len() > 16 {
                        kept.swap_remove(i % 16);
                    }
                }
            })
        };
        for &a in &buffers {
            register_and_release(&mut m, a, LEN);
        }
        for round in 0..ROUNDS {
            let addr = buffers[round % BUFFERS];
            // What serves the buffer while it stays mapped (its own
            // registration, or a neighbour's merged over it)...
            let before = register_and_release(&mut m, addr, LEN);
            assert_eq!(register_and_release(&mut m, addr, LEN), before, "a hit");
            // ...is not what serves it once the other thread replaced it.
            unmap_tx.send(addr).expect("unmapper alive");
            remapped_rx.recv().expect("unmapper alive");
            let after = register_and_release(&mut m, addr, LEN);
            assert_ne!(
                after, before,
                "round {round}: the old registration was served"
            );
        }
        drop(unmap_tx);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        unmapper.join().expect("unmapper");
        allocator.join().expect("allocator");
        for &a in &buffers {
            unmap(a, LEN);
        }
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(Duration::from_secs(120)) {
        // A panic disconnects the channel; joining reports it.
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            messenger_thread.join().expect("messenger thread")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("deadlock: no progress in 120 s"),
    }
}

/// Buffers from the allocator are registered, released and freed (a
/// `free` that unmaps them, holding the thread until the monitor has read
/// the event), while another thread allocates and frees without pause;
/// applying each invalidation then deregisters through the transport,
/// which allocates and frees too. Nothing deadlocks, every freed buffer's
/// registration is invalidated, and a new buffer at a freed buffer's
/// address is registered anew.
#[test]
fn freeing_registered_buffers_while_another_thread_allocates_does_not_deadlock() {
    drop(monitor_or_skip!());
    // A fixed mmap threshold (the default one, but no longer raised by
    // frees), so that every buffer below is a mapping `free` unmaps.
    // SAFETY: mallopt only changes the allocator's settings.
    #[allow(unsafe_code)]
    let fixed = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    assert_eq!(fixed, 1);
    const ROUNDS: usize = 200;
    // Above the allocator's mmap threshold: each buffer is a mapping of its
    // own, unmapped by `free`.
    const SIZE: usize = 1 << 20;
    let (done_tx, done_rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let (_registry, mut m) = with_monitor();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let allocator = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                for i in 0..1_000_000usize {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    kept.push(vec![i as u8; 1 + (i * 7919) % (2 << 20)]);
                    if kept.len() > 8 {
                        kept.swap_remove(i % 8);
                    }
                }
            })
        };
        let mut freed: std::collections::HashMap<usize, u64> = Default::default();
        for round in 0..ROUNDS {
            let buffer = vec![round as u8; SIZE];
            let addr = buffer.as_ptr() as usize;
            let id = register_and_release(&mut m, addr, SIZE);
            if let Some(old) = freed.get(&addr) {
                assert_ne!(
                    id, *old,
                    "round {round}: a freed buffer's registration was served"
                );
            }
            drop(buffer);
            freed.insert(addr, id);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        allocator.join().expect("allocator");
        // Applies what the monitor reported for the last buffer.
        m.progress().expect("progress");
        let stats = m.registration_stats();
        assert!(
            stats.invalidations >= ROUNDS as u64,
            "{} invalidations for {ROUNDS} freed buffers",
            stats.invalidations
        );
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => worker.join().expect("worker"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("deadlock: no progress in 120 s"),
    }
}
