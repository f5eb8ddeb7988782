//! The classic OpenSHMEM histogram: the bins are spread block-wise over
//! the PEs' symmetric heaps, and every PE draws samples and counts each
//! one with a remote atomic add on the bin's owner. Then every PE hands
//! each owner the counts it sent there, each owner checks its bins
//! against them, and PE 0 checks the grand total against what every PE
//! said it drew (a fetch-add each).
//!
//! ```text
//! fireopal run -n 4 target/debug/examples/shmem_histogram [SAMPLES [BINS]]
//! ```
//!
//! SAMPLES per PE (default 100000), BINS in all (default 1000, so that
//! some PE counts do not divide it).

use std::process::ExitCode;

const DEFAULT_SAMPLES: u64 = 100_000;
const DEFAULT_BINS: usize = 1000;
const WORD: usize = std::mem::size_of::<u64>();

fn main() -> ExitCode {
    let (samples, bins) = match parse(std::env::args().skip(1)) {
        Some(args) => args,
        None => {
            eprintln!("usage: shmem_histogram [SAMPLES [BINS]], BINS at least 1");
            return ExitCode::from(2);
        }
    };
    match run(samples, bins) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmem_histogram: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Option<(u64, usize)> {
    let samples = match args.next() {
        Some(a) => a.parse().ok()?,
        None => DEFAULT_SAMPLES,
    };
    let bins = match args.next() {
        Some(a) => a.parse().ok().filter(|&b| b > 0)?,
        None => DEFAULT_BINS,
    };
    args.next().is_none().then_some((samples, bins))
}

/// splitmix64: a tiny generator whose stream depends only on its seed,
/// so a PE's samples depend only on its number.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A bin in `0..bins` for `x`: the high half of the 128-bit product,
/// which avoids the bias of a modulo.
fn bin_of(x: u64, bins: usize) -> usize {
    ((u128::from(x) * bins as u128) >> 64) as usize
}

/// How the bins are laid out: `per_pe` slots on every PE (the symmetric
/// allocation is the same size everywhere), the last PEs holding fewer
/// real bins, or none, when `bins` does not divide evenly.
#[derive(Clone, Copy)]
struct Layout {
    bins: usize,
    per_pe: usize,
}

impl Layout {
    fn new(bins: usize, n: u32) -> Self {
        Layout {
            bins,
            per_pe: bins.div_ceil(n as usize),
        }
    }

    /// The global bins PE `pe` owns.
    fn owned(self, pe: u32) -> std::ops::Range<usize> {
        let start = (pe as usize * self.per_pe).min(self.bins);
        start..(start + self.per_pe).min(self.bins)
    }
}

fn run(samples: u64, bins: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = fireopal::Runtime::init()?;
    let mut sh = rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    let layout = Layout::new(bins, n);
    let per_pe = layout.per_pe;
    let hist = sh.calloc(per_pe, WORD)?.cast::<u64>();
    // Row p holds what PE p sent to this PE's bins.
    let rows = sh.calloc(n as usize * per_pe, WORD)?.cast::<u64>();
    // On PE 0: the samples every PE says it drew.
    let drawn = sh.calloc(1, WORD)?.cast::<u64>();

    let mut rng = SplitMix(u64::from(me));
    let mut sent = vec![0u64; bins];
    for _ in 0..samples {
        let b = bin_of(rng.next(), bins);
        sent[b] += 1;
        let owner = (b / per_pe) as u32;
        sh.atomic_add(owner, hist.wrapping_add(b % per_pe), 1u64)?;
    }
    let before = sh.atomic_fetch_add(0, drawn, samples)?;
    // The others add the same amount, so PE 0 can never have seen more.
    let mut verdict = if before > u64::from(n - 1) * samples {
        Err(format!(
            "PE 0 counted {before} samples before this PE added its own"
        ))
    } else {
        Ok(())
    };
    for owner in 0..n {
        let owned = layout.owned(owner);
        if !owned.is_empty() {
            let row = rows.wrapping_add(me as usize * per_pe);
            sh.put(owner, row, &sent[owned])?;
        }
    }
    // Completes every add and put, everywhere.
    sh.barrier_all()?;

    let mut here = vec![0u64; per_pe];
    sh.get(me, &mut here, hist)?;
    let mut from = vec![0u64; n as usize * per_pe];
    sh.get(me, &mut from, rows)?;
    let owned = layout.owned(me);
    verdict = verdict.and_then(|()| check_bins(&here, &from, owned.clone()));
    let held: u64 = here.iter().sum();
    if verdict.is_ok() {
        println!(
            "PE {me} of {n}: bins {owned:?} hold {held} samples, all match the senders' counts"
        );
    }

    if me == 0 && verdict.is_ok() {
        let drawn_total = sh.atomic_fetch(0, drawn)?;
        let mut total = 0u64;
        for owner in 0..n {
            let mut theirs = vec![0u64; layout.owned(owner).len()];
            sh.get(owner, &mut theirs, hist)?;
            total += theirs.iter().sum::<u64>();
        }
        let want = u64::from(n) * samples;
        if total == want && drawn_total == want {
            println!("total: {total} samples in {bins} bins, {drawn_total} drawn by {n} PEs");
        } else {
            verdict = Err(format!(
                "the bins hold {total} samples and the PEs say they drew {drawn_total}, \
                 not {n} x {samples}"
            ));
        }
    }

    // Every PE frees and finalizes, mismatch or not, so no PE is left
    // waiting in a collective for one that gave up.
    sh.free(drawn.cast())?;
    sh.free(rows.cast())?;
    sh.free(hist.cast())?;
    rt.finalize()?;
    verdict.map_err(|e| format!("PE {me}: {e}").into())
}

/// Checks this PE's bins (`here`, the global bins `owned`) against the
/// rows of counts the PEs sent (`from`), and that the spare slots past
/// the last bin stayed zero.
fn check_bins(here: &[u64], from: &[u64], owned: std::ops::Range<usize>) -> Result<(), String> {
    let per_pe = here.len();
    for (i, &got) in here.iter().enumerate() {
        let want: u64 = from.chunks(per_pe).map(|row| row[i]).sum();
        if got != want {
            let what = if i < owned.len() {
                format!("bin {}", owned.start + i)
            } else {
                format!("spare slot {i}")
            };
            return Err(format!("{what} holds {got} but the PEs sent it {want}"));
        }
    }
    Ok(())
}
