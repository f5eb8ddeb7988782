//! Memory given back by shrinking the program break (what `free` does when
//! the top of the main heap is free) is registered anew. Alone in its test
//! binary: it moves the break itself, which is safe only while no other
//! thread allocates from the main heap (libtest runs this test on a thread
//! with an allocator arena of its own, and nothing else runs).

mod common;

use common::{monitor_or_skip, register_and_release};

#[test]
#[allow(unsafe_code)]
fn memory_given_back_by_shrinking_the_break_is_registered_again() {
    let (_registry, mut m) = monitor_or_skip!();
    const LEN: isize = 16 << 12;
    let page = 4096isize;
    // SAFETY: sbrk(0) only reads the break.
    let old = unsafe { libc::sbrk(0) } as isize;
    let pad = (page - old % page) % page;
    // SAFETY: grows the break by pages no one else uses: above the old
    // break, which the allocator of this thread does not draw from.
    let grown = unsafe { libc::sbrk(pad + LEN) };
    assert_ne!(
        grown as isize,
        -1,
        "sbrk: {}",
        std::io::Error::last_os_error()
    );
    let start = (old + pad) as usize;
    // SAFETY: the pages just added to the heap, owned by this test.
    unsafe { std::ptr::write_bytes(start as *mut u8, 1, LEN as usize) };
    let first = register_and_release(&mut m, start, LEN as usize);
    assert_eq!(register_and_release(&mut m, start, LEN as usize), first);
    // SAFETY: gives back exactly the pages added above; the registration
    // of them is released.
    assert_ne!(unsafe { libc::sbrk(-LEN) } as isize, -1);
    // SAFETY: the same pages again, new and zero-filled.
    assert_ne!(unsafe { libc::sbrk(LEN) } as isize, -1);
    let again = register_and_release(&mut m, start, LEN as usize);
    assert_ne!(
        again, first,
        "the registration of the given-back pages was served"
    );
    assert!(m.registration_stats().invalidations >= 1);
    // SAFETY: back to the break found at the start.
    assert_ne!(unsafe { libc::sbrk(-(pad + LEN)) } as isize, -1);
}
