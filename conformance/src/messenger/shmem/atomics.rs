//! Atomics: many PEs on one word over every path at once, every
//! operation on each width and signedness, and a lock by compare-swap
//! that keeps a plain read-modify-write to itself.

use std::fmt::Debug;
use std::time::Instant;

use fireopal::shmem::{AtomicWord, Shmem, WaitCmp};

use super::{err, Ctx, Outcome, LOCK_LIMIT, UPDATES};

pub(super) fn case_atomics(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let words = sh.calloc(5, 8).map_err(err("calloc"))?.cast::<u64>();
    let (sum, bits, lock) = (words, words.wrapping_add(1), words.wrapping_add(2));
    let small = words.wrapping_add(3).cast::<u32>();
    let spinning = words.wrapping_add(4);
    // Every PE (PE 0 on its own word too) adds to PE 0's counters, half
    // fetching, half not, so that every path updates them at once.
    let mut last = 0u64;
    for i in 0..UPDATES {
        if i % 2 == 0 {
            let old = sh
                .atomic_fetch_add(0, sum, 1u64)
                .map_err(err("fetch_add"))?;
            if i > 0 && old < last {
                return Err(format!("fetch_add went back from {last} to {old}"));
            }
            last = old;
        } else {
            sh.atomic_add(0, sum, 1u64).map_err(err("add"))?;
        }
        sh.atomic_add(0, small, 1u32).map_err(err("add 32"))?;
    }
    sh.atomic_or(0, bits, 1u64 << (me % 64))
        .map_err(err("or"))?;
    // A lock by compare-swap: each PE takes it once, in turn.
    acquire(&mut sh, lock, u64::from(me) + 1)?;
    let held = sh.atomic_swap(0, lock, 0u64).map_err(err("swap"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    if held != u64::from(me) + 1 {
        return Err(format!("lock held by {held} when PE {me} released it"));
    }
    // The last PE holds it while PE 0 spins on its own word, and releases
    // it only once PE 0 said it spins: PE 0's spin must serve the release,
    // which reaches it as a message when the last PE goes through the
    // transports (`--mixed-paths`).
    let last = n - 1;
    if me == last && n > 1 {
        acquire(&mut sh, lock, u64::from(last) + 1)?;
    }
    sh.barrier_all().map_err(err("barrier"))?;
    if me == last && n > 1 {
        sh.wait_until(spinning, WaitCmp::Eq, 1u64)
            .map_err(err("wait_until"))?;
        sh.atomic_set(0, lock, 0u64).map_err(err("set"))?;
        sh.quiet().map_err(err("quiet"))?;
    } else if me == 0 {
        if n > 1 {
            sh.put(last, spinning, &[1u64]).map_err(err("put"))?;
        }
        acquire(&mut sh, lock, 1)?;
        sh.atomic_set(0, lock, 0u64).map_err(err("set"))?;
    }
    sh.barrier_all().map_err(err("barrier"))?;
    let total = sh.atomic_fetch(0, sum).map_err(err("fetch"))?;
    let total32 = sh.atomic_fetch(0, small).map_err(err("fetch 32"))?;
    let mask = sh
        .atomic_fetch_xor(0, bits, 0u64)
        .map_err(err("fetch_xor"))?;
    let want_mask = (0..n).fold(0u64, |m, pe| m | 1 << (pe % 64));
    let want = UPDATES * u64::from(n);
    sh.barrier_all().map_err(err("barrier"))?;
    if total != want || u64::from(total32) != want {
        return Err(format!("updates lost: {total} and {total32} of {want}"));
    }
    if mask != want_mask {
        return Err(format!("bits {mask:#x}, expected {want_mask:#x}"));
    }
    let and = sh
        .atomic_fetch_and(0, bits, 1u64)
        .map_err(err("fetch_and"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    if and & 1 == 0 {
        return Err("fetch_and lost bit 0".into());
    }
    sh.free(words.cast()).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Takes the lock word `lock` on PE 0 by compare-swap from 0 to `mine`;
/// gives up after [`LOCK_LIMIT`], which only a lock never released hits.
fn acquire(sh: &mut Shmem<'_>, lock: *mut u64, mine: u64) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let old = sh
            .atomic_compare_swap(0, lock, 0u64, mine)
            .map_err(err("compare_swap"))?;
        if old == 0 {
            return Ok(());
        }
        if start.elapsed() > LOCK_LIMIT {
            return Err(format!("the lock was held by {old} for {LOCK_LIMIT:?}"));
        }
    }
}

/// A word type of the `atomic-ops` case, with the arithmetic that says
/// what each operation must leave.
trait Word: AtomicWord + PartialEq + Debug {
    /// The values the case works with: set, swap, add, and three masks.
    const VALUES: [Self; 6];
    fn add(self, other: Self) -> Self;
    fn and(self, other: Self) -> Self;
    fn or(self, other: Self) -> Self;
    fn xor(self, other: Self) -> Self;
}

macro_rules! word {
    ($($t:ty: $values:expr;)*) => {$(
        impl Word for $t {
            const VALUES: [Self; 6] = $values;
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn and(self, other: Self) -> Self {
                self & other
            }
            fn or(self, other: Self) -> Self {
                self | other
            }
            fn xor(self, other: Self) -> Self {
                self ^ other
            }
        }
    )*};
}

// High bits set, and a negative addend for the signed types, so that a
// width or sign lost on the way shows.
word! {
    u32: [0xF00D_0001, 0x8000_00FF, 0x7FFF_FFF0, 0xFFFF_0F0F, 0x0F0F_8000, 0xA5A5_A5A5];
    i32: [-2, i32::MIN + 7, -100, 0x7F0F_0F0F, -0x0F0F_0F10, 0x5A5A_5A5A];
    u64: [0xF00D_0000_0000_0001, 0x8000_0000_0000_00FF, 0xFFFF_FFFF_0000_0010,
          0xFFFF_0000_FFFF_0F0F, 0x0F0F_0000_8000_0000, 0xA5A5_A5A5_5A5A_5A5A];
    i64: [-3, i64::MIN + 11, -(1 << 40), 0x7F0F_0F0F_0F0F_0F0F, -0x0F0F_0F0F_0F10,
          0x5A5A_5A5A_A5A5_A5A5];
}

/// Every atomic operation, in turn, on this PE's word `w` of type `T` on
/// PE `pe`: each fetching one must return what the one before left, and
/// each non-fetching one leave what it should. Returns the word's last
/// value.
fn every_op<T: Word>(sh: &mut Shmem<'_>, pe: u32, w: *mut T) -> Result<T, String> {
    let [a, b, d, m1, m2, m3] = T::VALUES;
    let name = std::any::type_name::<T>();
    let check = |what: &str, got: T, want: T| {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "{name} {what} on PE {pe}: {got:?}, expected {want:?}"
            ))
        }
    };
    sh.atomic_set(pe, w, a).map_err(err("set"))?;
    check(
        "fetch after set",
        sh.atomic_fetch(pe, w).map_err(err("fetch"))?,
        a,
    )?;
    check("swap", sh.atomic_swap(pe, w, b).map_err(err("swap"))?, a)?;
    // A compare that fails changes nothing; one that holds swaps.
    let cas = sh
        .atomic_compare_swap(pe, w, a, d)
        .map_err(err("compare_swap"))?;
    check("failed compare-swap", cas, b)?;
    let cas = sh
        .atomic_compare_swap(pe, w, b, a)
        .map_err(err("compare_swap"))?;
    check("compare-swap", cas, b)?;
    let mut v = a;
    check(
        "fetch_add",
        sh.atomic_fetch_add(pe, w, d).map_err(err("fetch_add"))?,
        v,
    )?;
    v = v.add(d);
    sh.atomic_add(pe, w, d).map_err(err("add"))?;
    v = v.add(d);
    check(
        "fetch_and",
        sh.atomic_fetch_and(pe, w, m1).map_err(err("fetch_and"))?,
        v,
    )?;
    v = v.and(m1);
    sh.atomic_and(pe, w, m2).map_err(err("and"))?;
    v = v.and(m2);
    check(
        "fetch_or",
        sh.atomic_fetch_or(pe, w, m3).map_err(err("fetch_or"))?,
        v,
    )?;
    v = v.or(m3);
    sh.atomic_or(pe, w, m1).map_err(err("or"))?;
    v = v.or(m1);
    check(
        "fetch_xor",
        sh.atomic_fetch_xor(pe, w, m2).map_err(err("fetch_xor"))?,
        v,
    )?;
    v = v.xor(m2);
    sh.atomic_xor(pe, w, m3).map_err(err("xor"))?;
    v = v.xor(m3);
    check(
        "fetch at the end",
        sh.atomic_fetch(pe, w).map_err(err("fetch"))?,
        v,
    )?;
    Ok(v)
}

/// Every atomic operation on 32- and 64-bit words, signed and unsigned,
/// by each PE on its own words on the next PE; after a barrier each PE
/// reads its words as the previous PE left them.
pub(super) fn case_atomic_ops(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // Per PE: a u32 and an i32 sharing 8 bytes, then a u64 and an i64.
    let words = sh.calloc(n as usize * 3, 8).map_err(err("calloc"))?;
    let base = |pe: u32| words.wrapping_add(pe as usize * 24);
    let at = |pe: u32| {
        (
            base(pe).cast::<u32>(),
            base(pe).wrapping_add(4).cast::<i32>(),
            base(pe).wrapping_add(8).cast::<u64>(),
            base(pe).wrapping_add(16).cast::<i64>(),
        )
    };
    let (w32, wi32, w64, wi64) = at(me);
    let left = (
        every_op(&mut sh, next, w32)?,
        every_op(&mut sh, next, wi32)?,
        every_op(&mut sh, next, w64)?,
        every_op(&mut sh, next, wi64)?,
    );
    sh.barrier_all().map_err(err("barrier"))?;
    // The previous PE's words here hold what this PE's did on the next;
    // every PE ran the same operations.
    let (p32, pi32, p64, pi64) = at(prev);
    // SAFETY: aligned words of this heap, written by no PE after the
    // barrier.
    #[allow(unsafe_code)]
    let here = unsafe {
        (
            p32.read_volatile(),
            pi32.read_volatile(),
            p64.read_volatile(),
            pi64.read_volatile(),
        )
    };
    if here != left {
        return Err(format!(
            "words PE {prev} left here: {here:x?}, expected {left:x?}"
        ));
    }
    sh.barrier_all().map_err(err("barrier"))?;
    sh.free(words).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Times each PE takes the `lock` case's lock.
const LOCKED_ROUNDS: u64 = 20;

/// A lock by compare-swap on PE 0 keeps a plain read-modify-write to
/// itself: holding it, a PE gets a counter from PE 0, puts it back one
/// higher and completes the put with `quiet` before releasing. An
/// increment lost to two holders at once shows in the total.
pub(super) fn case_lock(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let words = sh.calloc(2, 8).map_err(err("calloc"))?.cast::<u64>();
    let (lock, counter) = (words, words.wrapping_add(1));
    let mine = u64::from(me) + 1;
    for _ in 0..LOCKED_ROUNDS {
        acquire(&mut sh, lock, mine)?;
        let mut count = [0u64];
        sh.get(0, &mut count, counter).map_err(err("get"))?;
        sh.put(0, counter, &[count[0] + 1]).map_err(err("put"))?;
        sh.quiet().map_err(err("quiet"))?;
        let held = sh
            .atomic_compare_swap(0, lock, mine, 0)
            .map_err(err("compare_swap"))?;
        if held != mine {
            return Err(format!("the lock held {held} when PE {me} released it"));
        }
    }
    sh.barrier_all().map_err(err("barrier"))?;
    let total = sh.atomic_fetch(0, counter).map_err(err("fetch"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    let want = LOCKED_ROUNDS * u64::from(n);
    if total != want {
        return Err(format!(
            "the counter is {total} after {want} locked increments"
        ));
    }
    sh.free(words.cast()).map_err(err("free"))?;
    Ok(Outcome::Passed)
}
