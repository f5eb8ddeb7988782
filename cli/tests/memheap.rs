//! The symmetric heap end to end, with each memheap component: selection
//! through the API and through `fireopal info`, the OpenSHMEM edge cases of
//! every call, contents across calloc and realloc, exhaustion, the size
//! parameter and its errors, and the same offsets on every rank of a
//! `fireopal run -n 2` job.
//!
//! The `ptmalloc` plugin and the `memheap_offsets` example are built here
//! (once, with the cargo that built this test) when missing or stale. Every
//! child process runs under a time limit.
#![allow(unsafe_code)]

mod common;

use common::{built, host_example, profile_dir, workspace, FIREOPAL};

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use fireopal::memheap::{FreeError, InitError, SymmetricHeap, DEFAULT_ALIGN};
use fireopal::plugin::{Options, Origin, Registry};

const COMPONENTS: [&str; 2] = ["buddy", "ptmalloc"];
const PLUGIN_FILE: &str = "libfireopal_memheap_ptmalloc.so";

/// The ptmalloc plugin, next to the `fireopal` binary.
fn plugin() -> &'static Path {
    static PLUGIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = PLUGIN.get_or_init(|| {
        let src = workspace().join("plugins").join("memheap-ptmalloc");
        built(
            profile_dir().join(PLUGIN_FILE),
            &[
                src.join("src"),
                src.join("Cargo.toml"),
                workspace().join("abi").join("src"),
            ],
            &["-p", "fireopal-memheap-ptmalloc"],
        )
    });
    r.as_deref().unwrap_or_else(|e| panic!("{e}"))
}

/// The `memheap_offsets` example.
fn example() -> &'static Path {
    static EXAMPLE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = EXAMPLE.get_or_init(|| host_example("memheap_offsets"));
    r.as_deref().unwrap_or_else(|e| panic!("{e}"))
}

fn plugin_dir() -> PathBuf {
    plugin().parent().map(Path::to_path_buf).unwrap_or_default()
}

fn options(env: &[(&str, &str)], cli: &[(&str, &str)]) -> Options {
    let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let mut environment = own(env);
    environment.push((
        "FIREOPAL_PLUGIN_PATH".into(),
        plugin_dir().display().to_string(),
    ));
    Options {
        environment: Some(environment),
        command_line: own(cli),
        ..Options::default()
    }
}

/// A heap of `size` with `component` forced.
fn heap(component: &str, size: &str) -> SymmetricHeap {
    let opts = options(
        &[
            ("FIREOPAL_MEMHEAP", component),
            ("FIREOPAL_SYMMETRIC_SIZE", size),
        ],
        &[],
    );
    let registry = Registry::open(&opts).unwrap_or_else(|e| panic!("{component}: {e}"));
    let heap = SymmetricHeap::init(&registry, &opts).unwrap_or_else(|e| panic!("{component}: {e}"));
    assert_eq!(heap.component(), component);
    heap
}

fn live(heap: &SymmetricHeap) -> u64 {
    heap.stats().unwrap().live_allocations
}

fn fill(p: *mut u8, len: usize, byte: u8) {
    // SAFETY: the tests call this on live blocks of at least `len` bytes.
    unsafe { std::ptr::write_bytes(p, byte, len) };
}

fn holds(p: *const u8, len: usize, byte: u8) -> bool {
    // SAFETY: as in `fill`; nothing else writes the block meanwhile.
    unsafe { std::slice::from_raw_parts(p, len) }
        .iter()
        .all(|&b| b == byte)
}

#[test]
fn the_heap_is_shareable_between_threads() {
    fn check<T: Send + Sync>() {}
    check::<SymmetricHeap>();
}

#[test]
fn buddy_is_preferred_and_either_component_can_be_chosen() {
    plugin();
    let r = Registry::open(&options(&[], &[])).unwrap();
    let memheaps: Vec<(&str, Option<u32>, bool, bool)> = r
        .components()
        .iter()
        .filter(|c| c.framework().name() == "memheap" && c.priority().is_some())
        .map(|c| {
            (
                c.name(),
                c.priority(),
                c.origin() == &Origin::BuiltIn,
                c.is_selected(),
            )
        })
        .collect();
    assert_eq!(
        memheaps,
        [
            ("buddy", Some(30), true, true),
            ("ptmalloc", Some(10), false, false)
        ]
    );
    for name in COMPONENTS {
        let r = Registry::open(&options(&[("FIREOPAL_MEMHEAP", name)], &[])).unwrap();
        assert_eq!(r.selected_memheap().map(|c| c.name()), Some(name));
    }
    let r = Registry::open(&options(&[], &[("memheap_ptmalloc_priority", "31")])).unwrap();
    assert_eq!(r.selected_memheap().map(|c| c.name()), Some("ptmalloc"));
    let r = Registry::open(&options(&[("FIREOPAL_MEMHEAP", "^buddy")], &[])).unwrap();
    assert_eq!(r.selected_memheap().map(|c| c.name()), Some("ptmalloc"));
}

#[test]
fn openshmem_edge_cases() {
    for name in COMPONENTS {
        let heap = heap(name, "1m");
        let empty = heap.stats().unwrap();
        // Size 0: null, nothing happens.
        assert!(heap.malloc(0).is_null(), "{name}");
        assert!(heap.calloc(0, 8).is_null() && heap.calloc(8, 0).is_null());
        assert!(heap.calloc(usize::MAX, 2).is_null());
        assert!(heap.align(64, 0).is_null());
        assert_eq!(heap.stats().unwrap(), empty);
        // free(null) does nothing.
        assert_eq!(heap.free(std::ptr::null_mut()), Ok(()));
        // Alignments that are not powers of two, or above the base's.
        for bad in [0usize, 3, 24, 1000] {
            assert!(heap.align(bad, 64).is_null(), "{name}: align {bad}");
        }
        assert!(heap.base_alignment() >= 1 << 20);
        assert!(heap.align(heap.base_alignment() as usize * 2, 64).is_null());
        assert_eq!(heap.stats().unwrap(), empty);
        // Power-of-two alignments hold for addresses.
        for shift in 0..=16 {
            let p = heap.align(1 << shift, 100);
            assert!(
                !p.is_null() && p as usize % (1 << shift) == 0,
                "{name} {shift}"
            );
            heap.free(p).unwrap();
        }
        let p = heap.malloc(24);
        assert_eq!(p as usize % DEFAULT_ALIGN as usize, 0);
        // realloc(null, n) is malloc; realloc(p, 0) frees and gives null.
        let q = heap.realloc(std::ptr::null_mut(), 40);
        assert!(!q.is_null());
        assert_eq!(live(&heap), 2);
        assert!(heap.realloc(q, 0).is_null());
        assert_eq!(live(&heap), 1);
        assert!(matches!(heap.free(q), Err(FreeError::NotAllocated(_))));
        // Pointers that are not live allocations change nothing.
        let before = heap.stats().unwrap();
        let outside = std::ptr::addr_of!(before) as *mut u8;
        assert_eq!(heap.free(outside), Err(FreeError::OutsideHeap));
        assert!(heap.realloc(outside, 10).is_null());
        assert!(heap.free(p.wrapping_add(8)).is_err());
        assert!(heap.realloc(p.wrapping_add(8), 10).is_null());
        assert_eq!(heap.stats().unwrap(), before);
        heap.free(p).unwrap();
        assert_eq!(heap.stats().unwrap(), empty);
    }
}

#[test]
fn offsets_and_pointers_convert_with_range_checks() {
    for name in COMPONENTS {
        let heap = heap(name, "64k");
        let base = heap.base();
        assert_eq!(heap.len(), 64 << 10);
        assert_eq!(heap.ptr_at(0), Some(base));
        assert_eq!(heap.ptr_at(heap.len() - 1), Some(base.wrapping_add(65535)));
        assert_eq!(heap.ptr_at(heap.len()), None);
        assert_eq!(heap.ptr_at(u64::MAX), None);
        assert_eq!(heap.offset_of(base), Some(0));
        assert_eq!(heap.offset_of(base.wrapping_sub(1)), None);
        assert_eq!(heap.offset_of(base.wrapping_add(65536)), None);
        assert_eq!(heap.offset_of(std::ptr::null()), None);
        let p = heap.malloc(100);
        let off = heap.offset_of(p).unwrap();
        assert_eq!(heap.ptr_at(off), Some(p));
    }
}

#[test]
fn calloc_zeroes_reused_memory() {
    for name in COMPONENTS {
        let heap = heap(name, "1m");
        let p = heap.malloc(5000);
        fill(p, 5000, 0xEE);
        heap.free(p).unwrap();
        let q = heap.calloc(1000, 5);
        // The same block comes back, dirty, and calloc cleans it.
        assert_eq!(q, p, "{name}");
        assert!(holds(q, 5000, 0), "{name}");
    }
}

#[test]
fn realloc_keeps_contents_when_growing_and_shrinking() {
    for name in COMPONENTS {
        let heap = heap(name, "4m");
        let a = heap.malloc(1000);
        fill(a, 1000, 0x11);
        // Something right after `a`, so that growing must move it.
        let blocker = heap.malloc(1000);
        fill(blocker, 1000, 0x22);
        let grown = heap.realloc(a, 300_000);
        assert!(!grown.is_null());
        assert_ne!(grown, a, "{name}: expected a move");
        assert!(holds(grown, 1000, 0x11), "{name}: grow lost data");
        fill(grown, 300_000, 0x33);
        let shrunk = heap.realloc(grown, 10);
        assert!(holds(shrunk, 10, 0x33), "{name}: shrink lost data");
        // Grow in place where the component can, still keeping the bytes.
        let again = heap.realloc(shrunk, 20_000);
        assert!(holds(again, 10, 0x33), "{name}: regrow lost data");
        assert!(holds(blocker, 1000, 0x22), "{name}: neighbour clobbered");
        assert_eq!(live(&heap), 2);
        heap.free(again).unwrap();
        heap.free(blocker).unwrap();
        assert_eq!(live(&heap), 0);
    }
}

#[test]
fn exhaustion_returns_null_and_the_heap_works_afterwards() {
    for name in COMPONENTS {
        let heap = heap(name, "256k");
        let mut blocks = Vec::new();
        loop {
            let p = heap.malloc(3000);
            if p.is_null() {
                break;
            }
            fill(p, 3000, blocks.len() as u8);
            blocks.push(p);
        }
        assert!(blocks.len() >= 40, "{name}: {}", blocks.len());
        let full = heap.stats().unwrap();
        assert!(heap.malloc(3000).is_null());
        assert!(heap.calloc(3000, 1).is_null());
        assert!(heap.align(4096, 3000).is_null());
        assert!(heap.malloc(1 << 30).is_null());
        assert!(heap.realloc(blocks[0], 1 << 20).is_null());
        assert_eq!(
            heap.stats().unwrap(),
            full,
            "{name}: a failed call changed the heap"
        );
        for (i, &p) in blocks.iter().enumerate() {
            assert!(holds(p, 3000, i as u8), "{name}: block {i}");
        }
        heap.free(blocks.swap_remove(7)).unwrap();
        let p = heap.malloc(3000);
        assert!(!p.is_null(), "{name}: no room after a free");
        blocks.push(p);
        for p in blocks {
            heap.free(p).unwrap();
        }
        let s = heap.stats().unwrap();
        assert_eq!(s.live_allocations, 0);
        assert!(
            !heap.malloc(200 << 10).is_null(),
            "{name}: free space did not merge"
        );
    }
}

#[test]
fn the_segment_is_a_memfd_of_the_heap_size() {
    for name in COMPONENTS {
        let heap = heap(name, "2m");
        let p = heap.malloc(64);
        fill(p, 64, 0x7A);
        let off = heap.offset_of(p).unwrap();
        let file = std::fs::File::from(heap.fd().try_clone_to_owned().unwrap());
        assert_eq!(file.metadata().unwrap().len(), 2 << 20);
        let mut byte = [0u8; 1];
        // SAFETY: reads one byte of the memfd into a local buffer.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                off as libc::off_t,
            )
        };
        assert_eq!((n, byte[0]), (1, 0x7A), "{name}");
        assert_eq!(heap.base() as usize % (2 << 20), 0);
    }
}

#[test]
fn size_comes_from_the_parameter_or_shmem_symmetric_size() {
    let sized = |env: &[(&str, &str)], cli: &[(&str, &str)]| {
        let opts = options(env, cli);
        let registry = Registry::open(&opts).unwrap();
        SymmetricHeap::init(&registry, &opts).map(|h| h.len())
    };
    assert_eq!(
        sized(&[("SHMEM_SYMMETRIC_SIZE", "3M")], &[]).unwrap(),
        3 << 20
    );
    assert_eq!(
        sized(
            &[
                ("SHMEM_SYMMETRIC_SIZE", "3M"),
                ("FIREOPAL_SYMMETRIC_SIZE", "1.5m")
            ],
            &[]
        )
        .unwrap(),
        3 << 19
    );
    assert_eq!(
        sized(
            &[("FIREOPAL_SYMMETRIC_SIZE", "1m")],
            &[("symmetric_size", "512k")]
        )
        .unwrap(),
        512 << 10
    );
    assert_eq!(sized(&[], &[]).unwrap(), 256 << 20);
    // A zero-byte heap is allowed and has no room.
    let opts = options(&[("FIREOPAL_SYMMETRIC_SIZE", "0")], &[]);
    let heap = SymmetricHeap::init(&Registry::open(&opts).unwrap(), &opts).unwrap();
    assert!(heap.is_empty() && heap.malloc(1).is_null());
}

#[test]
fn invalid_sizes_are_clear_errors_naming_the_variable() {
    let error = |env: &[(&str, &str)], cli: &[(&str, &str)]| {
        let opts = options(env, cli);
        // The heap checks the size itself, even past a registry that
        // discovery's own check refused.
        let registry = Registry::discover(&opts);
        let e = match SymmetricHeap::init(&registry, &opts) {
            Err(e @ InitError::Size(_)) => e.to_string(),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("{env:?} {cli:?} accepted"),
        };
        // Discovery refuses the fireopal parameter with the same words;
        // OpenSHMEM's variable is the heap's alone.
        match Registry::open(&opts) {
            Err(d) => assert_eq!(e, format!("symmetric heap size: {d}")),
            Ok(_) => assert!(e.contains("SHMEM_SYMMETRIC_SIZE"), "{e}"),
        }
        e
    };
    let e = error(&[("FIREOPAL_SYMMETRIC_SIZE", "12q")], &[]);
    assert!(
        e.contains("parameter symmetric_size")
            && e.contains("FIREOPAL_SYMMETRIC_SIZE")
            && e.contains("\"12q\""),
        "{e}"
    );
    let e = error(&[], &[("symmetric_size", "-1")]);
    assert!(
        e.contains("symmetric_size") && e.contains("command line"),
        "{e}"
    );
    let e = error(&[("SHMEM_SYMMETRIC_SIZE", "lots")], &[]);
    assert!(
        e.contains("SHMEM_SYMMETRIC_SIZE") && e.contains("\"lots\""),
        "{e}"
    );
    // Too large to map: a clear error too, not a crash.
    let opts = options(&[("FIREOPAL_SYMMETRIC_SIZE", "16000000t")], &[]);
    let err = SymmetricHeap::init(&Registry::open(&opts).unwrap(), &opts).unwrap_err();
    assert!(matches!(err, InitError::Map(_)), "{err}");
}

#[test]
fn a_bad_buddy_min_block_fails_init_naming_the_parameter() {
    let opts = options(&[("FIREOPAL_MEMHEAP_BUDDY_MIN_BLOCK", "100")], &[]);
    let registry = Registry::open(&opts).unwrap();
    let err = SymmetricHeap::init(&registry, &opts).unwrap_err();
    assert!(
        matches!(err, InitError::Open(_)) && err.to_string().contains("memheap_buddy_min_block"),
        "{err}"
    );
    // A valid one changes the smallest block.
    let opts = options(&[("FIREOPAL_MEMHEAP_BUDDY_MIN_BLOCK", "4k")], &[]);
    let heap = SymmetricHeap::init(&Registry::open(&opts).unwrap(), &opts).unwrap();
    heap.malloc(1);
    assert_eq!(heap.stats().unwrap().used_bytes, 4096);
}

#[test]
fn buddy_cache_bounds_come_from_parameters() {
    let opts = options(&[("FIREOPAL_MEMHEAP_BUDDY_CACHE_BLOCKS", "5000")], &[]);
    let err = SymmetricHeap::init(&Registry::open(&opts).unwrap(), &opts).unwrap_err();
    assert!(
        matches!(err, InitError::Open(_)) && err.to_string().contains("memheap_buddy_cache_blocks"),
        "{err}"
    );
    // A freed block waits in its cache, unmerged, so a block twice its size
    // goes elsewhere; with the caches off it merges at once and the larger
    // block takes its place.
    let second_offset = |cache_blocks: &str, cache_bytes: &str| {
        let opts = options(
            &[
                ("FIREOPAL_MEMHEAP", "buddy"),
                ("FIREOPAL_MEMHEAP_BUDDY_MIN_BLOCK", "64"),
                ("FIREOPAL_MEMHEAP_BUDDY_CACHE_BLOCKS", cache_blocks),
                ("FIREOPAL_MEMHEAP_BUDDY_CACHE_BYTES", cache_bytes),
            ],
            &[],
        );
        let heap = SymmetricHeap::init(&Registry::open(&opts).unwrap(), &opts).unwrap();
        let a = heap.malloc(64);
        let first = heap.offset_of(a).expect("in the heap");
        heap.free(a).expect("live block");
        let b = heap.malloc(128);
        let second = heap.offset_of(b).expect("in the heap");
        heap.free(b).expect("live block");
        (first, second)
    };
    let (first, cached) = second_offset("32", "0");
    assert_ne!(cached, first, "caches on: the freed block stayed cached");
    assert_eq!(
        second_offset("32", "64"),
        (first, cached),
        "64 bytes hold it"
    );
    let (first_off, merged) = second_offset("0", "0");
    assert_eq!(first, first_off);
    assert_eq!(merged, first, "caches off: the freed block merged");
    assert_eq!(
        second_offset("32", "32"),
        (first, first),
        "a block larger than the byte bound is never cached"
    );
}

/// Runs `cmd` with a time limit; on expiry the child is stopped (SIGTERM,
/// then SIGKILL) and the test fails. Returns (exit code, stdout, stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let reader = |mut s: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout")));
    let err = reader(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (
        status.code().unwrap_or(-1),
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

const LIMIT: Duration = Duration::from_secs(60);

fn fireopal(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(FIREOPAL);
    cmd.args(args)
        .env_remove("FIREOPAL_PLUGIN_PATH")
        .env_remove("FIREOPAL_MEMHEAP")
        .env_remove("FIREOPAL_SYMMETRIC_SIZE")
        .env_remove("SHMEM_SYMMETRIC_SIZE")
        .envs(env.iter().copied());
    run_bounded(&mut cmd, LIMIT)
}

#[test]
fn fireopal_info_lists_and_selects_both_components() {
    let found = plugin().display().to_string();
    // Next to the binary.
    let (code, out, err) = fireopal(&["info", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        r#""framework":"memheap","name":"buddy","origin":"built-in","version":"0.1.0","status":"available","priority":30,"reason":null,"note":null,"selected":true"#.to_owned(),
        format!(
            r#""framework":"memheap","name":"ptmalloc","origin":"{found}","version":"0.1.0","status":"available","priority":10,"reason":null,"note":null,"selected":false"#
        ),
        r#""name":"memheap_buddy_min_block","owner":"memheap buddy","type":"size","value":64"#.to_owned(),
    ] {
        assert!(out.contains(&needle), "missing {needle} in {out}");
    }
    // The columns are as wide as their entries: compare words.
    let has_row = |out: &str, row: &str| {
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row)
    };
    let (code, out, _) = fireopal(&["info"], &[("FIREOPAL_MEMHEAP", "ptmalloc")]);
    assert_eq!(code, 0);
    assert!(
        has_row(
            &out,
            "memheap ptmalloc 0.1.0 available (priority 10) [selected]"
        ),
        "{out}"
    );
    assert!(has_row(
        &out,
        "memheap buddy 0.1.0 excluded by parameter memheap"
    ));
    let (_, out, _) = fireopal(&["info"], &[("FIREOPAL_MEMHEAP", "buddy")]);
    assert!(
        has_row(
            &out,
            "memheap buddy 0.1.0 available (priority 30) [selected]"
        ),
        "{out}"
    );
    let (_, out, _) = fireopal(&["info", "--param", "memheap_ptmalloc_priority=77"], &[]);
    assert!(
        has_row(
            &out,
            "memheap ptmalloc 0.1.0 available (priority 77) [selected]"
        ),
        "{out}"
    );
    // A priority that does not fit in 32 bits is refused, not cut short.
    let (_, out, _) = fireopal(
        &["info", "--param", "memheap_buddy_priority=4294967296"],
        &[],
    );
    assert!(
        out.contains("memheap_buddy_priority = 4294967296 does not fit in 32 bits"),
        "{out}"
    );

    // Through FIREOPAL_PLUGIN_PATH: a copy in another directory comes first.
    let dir = profile_dir()
        .join("memheap-test")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(plugin(), dir.join(PLUGIN_FILE)).unwrap();
    let path = dir.display().to_string();
    let (code, out, err) = fireopal(
        &["info"],
        &[
            ("FIREOPAL_PLUGIN_PATH", &path),
            ("FIREOPAL_MEMHEAP", "ptmalloc"),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    let copy = dir.join(PLUGIN_FILE).display().to_string();
    assert!(
        out.lines()
            .zip(out.lines().skip(1))
            .any(|(row, origin)| row.ends_with("[selected]")
                && origin.trim_start() == format!("from {copy}")),
        "{out}"
    );
    // The one next to the binary is now shadowed by the copy.
    assert!(out.contains(&format!("shadowed by {copy}")), "{out}");
}

/// The offsets line of each rank: (rank, component, the rest of the line).
fn offsets_of(out: &str) -> Vec<(u32, String, String)> {
    let mut v: Vec<(u32, String, String)> = out
        .lines()
        .filter_map(|l| {
            // `--tag-output` prints whole lines, each after "[rank] ".
            let (_, line) = l.split_once("] ")?;
            let rest = line.strip_prefix("rank ")?;
            let (rank, rest) = rest.split_once(" component ")?;
            let (component, rest) = rest.split_once(' ')?;
            Some((rank.parse().ok()?, component.to_owned(), rest.to_owned()))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn two_ranks_get_the_same_offsets_with_each_component() {
    let example = example().display().to_string();
    for name in COMPONENTS {
        plugin();
        let (code, out, err) = fireopal(
            &[
                "run",
                "-n",
                "2",
                "--tag-output",
                "--param",
                "symmetric_size=1m",
                "--",
                &example,
            ],
            &[("FIREOPAL_MEMHEAP", name)],
        );
        assert_eq!(code, 0, "{name}: {err}");
        let ranks = offsets_of(&out);
        assert_eq!(ranks.len(), 2, "{name}: {out}");
        assert_eq!((ranks[0].0, ranks[1].0), (0, 1));
        assert!(ranks.iter().all(|r| r.1 == name), "{name}: {out}");
        assert_eq!(ranks[0].2, ranks[1].2, "{name}: offsets differ");
        // The run did real work: many offsets, some calls failed on the
        // small heap, and the heap was filled at the end.
        let line = &ranks[0].2;
        let list = line
            .split(" offsets ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or("");
        let entries: Vec<&str> = list.split(',').collect();
        assert!(entries.len() > 300, "{name}: {line}");
        assert!(entries.contains(&"null"), "{name}: nothing failed");
        assert!(entries.iter().filter(|e| **e != "null").count() > 250);
        assert!(line.starts_with("size 1048576 "), "{line}");
    }
}

#[test]
fn a_job_with_a_bad_size_fails_naming_the_parameter() {
    let example = example().display().to_string();
    let (code, _, err) = fireopal(
        &[
            "run",
            "-n",
            "2",
            "--param",
            "symmetric_size=12q",
            "--",
            &example,
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains(
            "parameter symmetric_size: invalid value \"12q\" \
             from the command line (--param symmetric_size=12q)"
        ),
        "{err}"
    );
    let (code, _, err) = fireopal(
        &["run", "-n", "2", "--", &example],
        &[("SHMEM_SYMMETRIC_SIZE", "1.5x")],
    );
    assert_ne!(code, 0);
    assert!(err.contains("SHMEM_SYMMETRIC_SIZE"), "{err}");
}
