//! Puts and gets, blocking and not, their completion by `quiet` and
//! order by `fence`, put-with-signal, and many small puts.

use fireopal::shmem::{SignalOp, WaitCmp};

use super::{err, Ctx, Outcome, SIZES, SMALL_PUTS};
use crate::messenger::p2p::{key, pattern};

pub(super) fn case_put_get(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    for &len in &SIZES {
        let buf = sh.malloc(len).map_err(err("malloc"))?;
        let mine = pattern(key(&[1, u64::from(me), len as u64]), len);
        sh.put(next, buf, &mine).map_err(err("put"))?;
        sh.barrier_all().map_err(err("barrier"))?;
        let expect = pattern(key(&[1, u64::from(prev), len as u64]), len);
        // SAFETY: `len` bytes of this heap that no PE writes until the
        // next barrier.
        #[allow(unsafe_code)]
        let landed = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
        if landed != expect {
            return Err(format!("{len} bytes put by PE {prev} differ"));
        }
        let mut back = vec![0u8; len];
        sh.get(next, &mut back, buf).map_err(err("get"))?;
        if back != mine {
            return Err(format!("{len} bytes got from PE {next} differ"));
        }
        sh.free(buf).map_err(err("free"))?;
    }
    Ok(Outcome::Passed)
}

pub(super) fn case_nonblocking(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    const PIECES: usize = 64;
    const PIECE: usize = 1000;
    let buf = sh.calloc(PIECES, PIECE).map_err(err("calloc"))?;
    let mine = pattern(key(&[2, u64::from(me)]), PIECES * PIECE);
    for (i, chunk) in mine.chunks(PIECE).enumerate() {
        // SAFETY: `mine` is unchanged until the quiet below.
        #[allow(unsafe_code)]
        unsafe { sh.put_nbi(next, buf.wrapping_add(i * PIECE), chunk.as_ptr(), PIECE) }
            .map_err(err("put_nbi"))?;
    }
    sh.quiet().map_err(err("quiet"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    let mut back = vec![0u8; PIECES * PIECE];
    for (i, chunk) in back.chunks_mut(PIECE).enumerate() {
        // SAFETY: `back` is untouched until the quiet below.
        #[allow(unsafe_code)]
        unsafe { sh.get_nbi(me, chunk.as_mut_ptr(), buf.wrapping_add(i * PIECE), PIECE) }
            .map_err(err("get_nbi"))?;
    }
    sh.quiet().map_err(err("quiet"))?;
    if back != pattern(key(&[2, u64::from(prev)]), PIECES * PIECE) {
        return Err(format!("non-blocking puts from PE {prev} differ"));
    }
    sh.free(buf).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

pub(super) fn case_signal(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let len = 100_000;
    let data = sh.calloc(len, 1).map_err(err("calloc"))?;
    let sig = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    let mine = pattern(key(&[3, u64::from(me)]), len);
    sh.put_signal(next, data, &mine, sig, 1, SignalOp::Add)
        .map_err(err("put_signal"))?;
    let seen = sh
        .wait_until(sig, WaitCmp::Ge, 1u64)
        .map_err(err("wait_until"))?;
    // SAFETY: `len` bytes of this heap, written by PE `prev` before the
    // signal this PE saw.
    #[allow(unsafe_code)]
    let landed = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
    sh.barrier_all().map_err(err("barrier"))?;
    if seen != 1 {
        return Err(format!("signal is {seen}, expected 1"));
    }
    if landed != pattern(key(&[3, u64::from(prev)]), len) {
        return Err(format!("data signalled by PE {prev} differs"));
    }
    sh.free(sig.cast()).map_err(err("free"))?;
    sh.free(data).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Small puts, which a route whose target moves the data gathers into
/// batches: a thousand from every PE into every PE, with atomics on the
/// same targets among them and gets that must read back what this PE put
/// just before; then a ring where each PE puts into the next one's flag
/// and waits for its own, with no `quiet` between, which a batch held
/// back would deadlock.
pub(super) fn case_small_puts(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let slots = sh
        .calloc(n as usize * SMALL_PUTS, 8)
        .map_err(err("calloc"))?
        .cast::<u64>();
    let count = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    let flag = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    sh.barrier_all().map_err(err("barrier"))?;
    let value = |from: u32, to: u32, i: usize| key(&[7, u64::from(from), u64::from(to), i as u64]);
    let mine = |i: usize| slots.wrapping_add(me as usize * SMALL_PUTS + i);
    for t in (0..n).map(|k| (me + k) % n) {
        for i in 0..SMALL_PUTS {
            sh.put(t, mine(i), &[value(me, t, i)]).map_err(err("put"))?;
            if i % 97 == 0 {
                sh.atomic_add(t, count, 1u64).map_err(err("add"))?;
            }
            if i % 251 == 0 {
                let mut back = [0u64];
                sh.get(t, &mut back, mine(i)).map_err(err("get"))?;
                if back[0] != value(me, t, i) {
                    return Err(format!(
                        "a get from PE {t} missed this PE's put {i} before it"
                    ));
                }
            }
        }
    }
    let next = (me + 1) % n;
    sh.put(next, flag, &[u64::from(me) + 1])
        .map_err(err("put flag"))?;
    let seen = sh
        .wait_until(flag, WaitCmp::Ne, 0u64)
        .map_err(err("wait_until"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    let prev = (me + n - 1) % n;
    if seen != u64::from(prev) + 1 {
        return Err(format!("flag is {seen}, expected {}", prev + 1));
    }
    // SAFETY: `n * SMALL_PUTS` words of this heap, complete after the
    // barrier; the counter likewise.
    #[allow(unsafe_code)]
    let (landed, total) = unsafe {
        (
            std::slice::from_raw_parts(slots, n as usize * SMALL_PUTS).to_vec(),
            count.read_volatile(),
        )
    };
    for from in 0..n {
        for i in 0..SMALL_PUTS {
            let got = landed[from as usize * SMALL_PUTS + i];
            if got != value(from, me, i) {
                return Err(format!("put {i} from PE {from} holds {got:#x}"));
            }
        }
    }
    // Each PE added once every 97 puts to each target.
    let want = SMALL_PUTS.div_ceil(97) as u64 * u64::from(n);
    if total != want {
        return Err(format!("counter is {total}, expected {want}"));
    }
    sh.barrier_all().map_err(err("barrier"))?;
    for p in [flag, count] {
        sh.free(p.cast()).map_err(err("free"))?;
    }
    sh.free(slots.cast()).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Bytes each PE puts in the `quiet` case: past every eager limit.
const QUIET_LEN: usize = 300_001;

/// Completion by `quiet`, seen by a third PE: each PE puts into the next
/// one without waiting, calls `quiet`, then raises a flag on the PE after
/// that, which gets the bytes from the PE between as soon as it sees the
/// flag. Only a put complete at its target when `quiet` returns is there
/// to be got (on two PEs the flag is this PE's own; on one, all is local).
pub(super) fn case_quiet(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let nu = n as usize;
    let areas = sh.calloc(nu, QUIET_LEN).map_err(err("calloc"))?;
    let flags = sh.calloc(nu, 8).map_err(err("calloc"))?.cast::<u64>();
    let area = |pe: u32| areas.wrapping_add(pe as usize * QUIET_LEN);
    let flag = |pe: u32| flags.wrapping_add(pe as usize);
    let mine = pattern(key(&[12, u64::from(me)]), QUIET_LEN);
    // SAFETY: `mine` lives and is unchanged until the quiet below.
    #[allow(unsafe_code)]
    unsafe { sh.put_nbi((me + 1) % n, area(me), mine.as_ptr(), QUIET_LEN) }
        .map_err(err("put_nbi"))?;
    sh.quiet().map_err(err("quiet"))?;
    sh.put((me + 2) % n, flag(me), &[1u64])
        .map_err(err("put flag"))?;

    // The PE two before this one flags here; its bytes are on the PE
    // between.
    let writer = (me + 2 * n - 2) % n;
    let holder = (writer + 1) % n;
    sh.wait_until(flag(writer), WaitCmp::Eq, 1u64)
        .map_err(err("wait_until"))?;
    let mut got = vec![0u8; QUIET_LEN];
    sh.get(holder, &mut got, area(writer)).map_err(err("get"))?;
    if got != pattern(key(&[12, u64::from(writer)]), QUIET_LEN) {
        return Err(format!(
            "PE {writer} flagged after its quiet, yet its put to PE {holder} was not all there"
        ));
    }
    sh.free(flags.cast()).map_err(err("free"))?;
    sh.free(areas).map_err(err("free"))?;
    Ok(Outcome::Passed)
}

/// Sizes the `fence` case puts, round after round.
const FENCED: [usize; 4] = [8, 4096, 65_537, 1 << 20];
/// Rounds of the `fence` case.
const FENCE_ROUNDS: usize = 8;

/// Order by `fence`: each PE puts a block into the next one without
/// waiting, fences, and puts the round's number into a flag there, round
/// after round, blocks of a word to a megabyte (over several lanes, the
/// pieces of one put and the flag after it travel apart). Whenever the
/// next PE sees round `k` in the flag, every block up to round `k` must
/// be there.
pub(super) fn case_fence(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let len = |k: usize| FENCED[k % FENCED.len()];
    let at: Vec<usize> = (0..FENCE_ROUNDS)
        .scan(0, |off, k| {
            let here = *off;
            *off += len(k);
            Some(here)
        })
        .collect();
    let total = at[FENCE_ROUNDS - 1] + len(FENCE_ROUNDS - 1);
    let blocks = sh.calloc(total, 1).map_err(err("calloc"))?;
    let flag = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    let block = |from: u32, k: usize| pattern(key(&[13, u64::from(from), k as u64]), len(k));
    let mine: Vec<Vec<u8>> = (0..FENCE_ROUNDS).map(|k| block(me, k)).collect();
    let rounds: Vec<u64> = (1..=FENCE_ROUNDS as u64).collect();
    for (k, bytes) in mine.iter().enumerate() {
        // SAFETY: `mine` lives and is unchanged until the quiet below.
        #[allow(unsafe_code)]
        unsafe {
            sh.put_nbi(
                next,
                blocks.wrapping_add(at[k]),
                bytes.as_ptr(),
                bytes.len(),
            )
        }
        .map_err(err("put_nbi"))?;
        sh.fence().map_err(err("fence"))?;
        // SAFETY: `rounds` lives and is unchanged until the quiet below.
        #[allow(unsafe_code)]
        unsafe { sh.put_nbi(next, flag, &rounds[k], 1) }.map_err(err("put_nbi flag"))?;
    }
    let mut checked = 0;
    while checked < FENCE_ROUNDS {
        let seen = sh
            .wait_until(flag, WaitCmp::Gt, checked as u64)
            .map_err(err("wait_until"))?;
        let seen = usize::try_from(seen).map_err(|e| e.to_string())?;
        if seen > FENCE_ROUNDS {
            return Err(format!("flag holds {seen}, past the last round"));
        }
        for (k, &off) in at.iter().enumerate().take(seen).skip(checked) {
            // SAFETY: block `k` of this heap, written only by PE `prev`
            // and complete once its flag is seen.
            #[allow(unsafe_code)]
            let landed = unsafe { std::slice::from_raw_parts(blocks.wrapping_add(off), len(k)) };
            if landed != block(prev, k).as_slice() {
                return Err(format!(
                    "round {seen} flagged by PE {prev}, but its block {k} ({} bytes) is not all there",
                    len(k)
                ));
            }
        }
        checked = seen;
    }
    sh.quiet().map_err(err("quiet"))?;
    sh.barrier_all().map_err(err("barrier"))?;
    sh.free(flag.cast()).map_err(err("free"))?;
    sh.free(blocks).map_err(err("free"))?;
    Ok(Outcome::Passed)
}
