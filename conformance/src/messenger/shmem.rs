//! The one-sided cases of the messenger suite: put, get, atomics,
//! signals, `quiet` and the collective heap calls through
//! [`Shmem`], on every PE of a job started with
//! [`Runtime`], over whatever paths the job has (mappings between
//! node-local PEs, the transports otherwise).
//!
//! Each case checks every byte and every word against what the PEs
//! wrote, and ends at a barrier. With `mixed` (odd PEs run with
//! `shmem_direct=false`), the atomics case updates one word through
//! mappings, through the target's handler and by the target itself at
//! once, and must lose no update.

use std::time::{Duration, Instant};

use fireopal::shmem::{PathKind, Shmem, ShmemError, SignalOp, WaitCmp};
use fireopal::Runtime;

use super::p2p::{key, pattern};
use super::{run_cases, CaseOf, Outcome, SetupError, Tally};

/// Transfer sizes: a word, around a page, past the transports' eager
/// limits, and large.
const SIZES: [usize; 6] = [1, 8, 4096, 8193, 65_537, 1 << 20];
/// Atomic updates per PE on the shared word.
const UPDATES: u64 = 2000;
/// Small puts from each PE into each PE in the `small-puts` case.
const SMALL_PUTS: usize = 1000;
/// Longest a PE waits for a lock word before the case fails.
const LOCK_LIMIT: Duration = Duration::from_secs(60);
/// Longest PE 0 keeps operating on a PE that is leaving before the
/// `pe-death` case fails.
const DEATH_LIMIT: Duration = Duration::from_secs(60);

/// What every one-sided case works with on one PE.
pub struct Ctx {
    rt: Runtime,
    /// This PE is the one that dies in the `pe-death` case.
    leave: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

/// One one-sided case.
pub type Case = CaseOf<Ctx>;

/// Every case, in the order it runs.
/// (`pe-death` leaves the job one PE short, so it is last.)
pub const CASES: [(&str, Case); 8] = [
    ("heap", case_heap),
    ("put-get", case_put_get),
    ("nonblocking", case_nonblocking),
    ("atomics", case_atomics),
    ("signal", case_signal),
    ("small-puts", case_small_puts),
    ("bad-arguments", case_bad_arguments),
    ("pe-death", case_pe_death),
];

/// Runs `cases` on this PE, then finalizes, unless a case failed.
pub fn run(rt: Runtime, cases: &[(&'static str, Case)]) -> Result<Tally, SetupError> {
    let rank = rt.rank();
    let mut c = Ctx { rt, leave: false };
    {
        let mut sh = c.rt.shmem();
        let kinds: Vec<String> = (0..sh.n_pes())
            .map(|pe| match sh.path_kind(pe) {
                Ok(k) => format!("{k:?}"),
                Err(e) => format!("error ({e})"),
            })
            .collect();
        println!(
            "rank {rank}: paths to the PEs: {}; symmetric addresses: {}",
            kinds.join(", "),
            sh.symmetric_addresses()
        );
    }
    let tally = run_cases(rank, &mut c, cases);
    if c.leave {
        // Abruptly, as a crashed PE would: no finalize, no destructors.
        std::process::exit(0);
    }
    let short = c.rt.size() == 2 && cases.iter().any(|(name, _)| *name == "pe-death");
    if tally.failed > 0 || short {
        // Peers may still wait on this PE, or the job is one PE short: no
        // collective finalize.
        return Ok(tally);
    }
    c.rt.finalize().map_err(SetupError::Runtime)?;
    Ok(tally)
}

fn err(what: &str) -> impl Fn(ShmemError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn case_heap(c: &mut Ctx) -> Result<Outcome, String> {
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

fn case_put_get(c: &mut Ctx) -> Result<Outcome, String> {
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

fn case_nonblocking(c: &mut Ctx) -> Result<Outcome, String> {
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

fn case_atomics(c: &mut Ctx) -> Result<Outcome, String> {
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

fn case_signal(c: &mut Ctx) -> Result<Outcome, String> {
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
fn case_small_puts(c: &mut Ctx) -> Result<Outcome, String> {
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

fn case_bad_arguments(c: &mut Ctx) -> Result<Outcome, String> {
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

/// The PE an error blames, if it names one.
fn blamed(e: &ShmemError) -> Option<u32> {
    match e {
        ShmemError::PeerFailed { pe, .. } => Some(*pe),
        _ => None,
    }
}

/// PE 1 of a job of two leaves at once after a barrier, as a crashed PE
/// would. PE 0's fetching atomic on it (when it goes through the
/// transports: a mapped heap outlives its process) and its next barrier
/// must fail naming PE 1, and so must a put after that.
fn case_pe_death(c: &mut Ctx) -> Result<Outcome, String> {
    let mut sh = c.rt.shmem();
    if sh.n_pes() != 2 {
        return Ok(Outcome::NotApplicable("needs a job of 2 PEs".into()));
    }
    let word = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    if sh.my_pe() == 1 {
        c.leave = true;
        return Ok(Outcome::Passed);
    }
    let remote = sh.path_kind(1).map_err(err("path"))? == PathKind::Remote;
    if remote {
        // Until PE 1 is gone its handler answers; bounded by the stall
        // limit once it is.
        let start = Instant::now();
        loop {
            match sh.atomic_fetch_add(1, word, 1u64) {
                Ok(_) if start.elapsed() > DEATH_LIMIT => {
                    return Err(format!("PE 1 still answers after {DEATH_LIMIT:?}"))
                }
                Ok(_) => continue,
                Err(e) if blamed(&e) == Some(1) => break,
                Err(e) => {
                    return Err(format!(
                        "fetch_add on the dead PE failed without naming it: {e}"
                    ))
                }
            }
        }
    }
    match sh.barrier_all() {
        Ok(()) => return Err("a barrier with a dead PE completed".into()),
        Err(e) if blamed(&e) == Some(1) => {}
        Err(e) => {
            return Err(format!(
                "the barrier failed without naming the dead PE: {e}"
            ))
        }
    }
    if remote {
        match sh.put(1, word, &[5u64]) {
            Err(e) if blamed(&e) == Some(1) => {}
            other => return Err(format!("a put to the dead PE: {other:?}")),
        }
    }
    Ok(Outcome::Passed)
}
