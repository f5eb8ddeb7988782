//! OpenSHMEM on the symmetric heap in one page: every PE adds one to a
//! counter on PE 0 with a fetch-add, hands the value it saw to the next PE
//! with a put, and after a barrier PE 0 checks that every PE counted
//! once.
//!
//! ```text
//! fireopal run -n 4 target/debug/examples/shmem_counter
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmem_counter: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = fireopal::Runtime::init()?;
    let mut sh = rt.shmem();
    let (me, n) = (sh.my_pe(), sh.n_pes());
    // Two words, at the same offset on every PE: the counter and the
    // value the previous PE saw.
    let words = sh.calloc(2, 8)?.cast::<u64>();
    let (counter, seen) = (words, words.wrapping_add(1));
    let before = sh.atomic_fetch_add(0, counter, 1u64)?;
    sh.put((me + 1) % n, seen, &[before])?;
    sh.barrier_all()?;
    let total = sh.atomic_fetch(0, counter)?;
    let from_prev = sh.atomic_fetch(me, seen)?;
    println!(
        "PE {me} of {n}: counter {total}, the previous PE saw {from_prev}, path to PE 0 {:?}",
        sh.path_kind(0)?
    );
    if total != u64::from(n) {
        return Err(format!("counter is {total} after {n} PEs added one").into());
    }
    sh.free(words.cast())?;
    rt.finalize()?;
    Ok(())
}
