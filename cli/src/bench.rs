//! `fireopal bench pingpong`: OSU-style latency and bandwidth between
//! ranks 0 and 1 (or one process and itself), over the transport the BTL
//! framework picks, or the one named with `--btl`. `bench put` and
//! `bench get` measure one-sided operations ([`rma`]); `bench p2p` tagged
//! point-to-point messages ([`p2p`]); `bench registration` the
//! registration cache and its memory monitor ([`registration`]).
//!
//! Latency is half the round trip of a blocking ping-pong, averaged over
//! many iterations after a warm-up. Bandwidth sends windows of 64
//! back-to-back messages with one acknowledgement per window.
//!
//! `--from` says where messages above the eager limit are sent from:
//! `buffer` (a transfer buffer when the transport offers them, as a
//! runtime would place its large buffers, else as `copy`), `heap` (an
//! object of the symmetric heap, registered with the messenger), `user`
//! (ordinary memory, sent in place), `copy` (ordinary memory with `send`,
//! which copies before returning) or `registered` (tagged point-to-point
//! messages of `fireopal::p2p`, whose rendezvous registers the sender's
//! memory and lets the receiver read it with `get`, see [`tagged`]). The
//! default, `auto`, takes the path that moves a large message once on the
//! transport chosen: `buffer` where it offers transfer buffers (shm),
//! else `registered` where it offers `get` (tcp), else `copy`.

mod layer;
mod p2p;
mod registration;
mod rma;
mod shmem;
mod tagged;

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::btl::{Messenger, SendTicket, StallWatch, TransferBufferHandle};
use fireopal::memheap::SymmetricHeap;
use fireopal::p2p::P2p;
use fireopal::plugin::{Framework, Options, Registry, Status};
use fireopal::RuntimeError;
use fireopal_abi::btl::{BtlFlags, MemRegion};

use self::tagged::Tagged;
use super::args::{self, Arg, Args, Stop};
use super::json::Json;
use super::{discovery_failure, CommonArgs, Failure};

const SIZES: [usize; 8] = [0, 8, 64, 1 << 10, 8 << 10, 64 << 10, 1 << 20, 4 << 20];
const WINDOW: usize = 64;
const TAG_PING: u8 = 1;
const TAG_ACK: u8 = 2;
/// Longest wait for one message before the peer is declared gone.
const STALL: Duration = Duration::from_secs(30);

pub(super) const SYNOPSIS: &str = "\
fireopal bench pingpong [--btl NAME] [--from auto|buffer|heap|user|copy|registered]
        [--sizes N,...] [--json] [--quick] [--param name=value]...
fireopal bench p2p|put|get [--btl NAME] [--sizes N,...] [--json] [--quick] [--param name=value]...
fireopal bench layer [--btl NAME] [--sizes N,...] [--rounds N] [--json] [--quick] [--param name=value]...
fireopal bench registration [--btl NAME] [--rounds N] [--json] [--quick] [--param name=value]...
fireopal bench shmem|shmem-put|shmem-get|shmem-atomic [--btl NAME] [--sizes N,...] [--json] [--quick]
        [--param name=value]...";

const USAGE: &str = "\
usage: fireopal bench pingpong [--btl NAME] [--from auto|buffer|heap|user|copy|registered]
               [--sizes N,...] [--json] [--quick] [--param name=value]...
       fireopal bench p2p|put|get [--btl NAME] [--sizes N,...] [--json] [--quick]
               [--param name=value]...
       fireopal bench layer [--btl NAME] [--sizes N,...] [--rounds N] [--json] [--quick]
               [--param name=value]...
       fireopal bench registration [--btl NAME] [--rounds N] [--json] [--quick]
               [--param name=value]...
       fireopal bench shmem|shmem-put|shmem-get|shmem-atomic [--btl NAME] [--sizes N,...]
               [--json] [--quick] [--param name=value]...

Latency and bandwidth between ranks 0 and 1, OSU-style: of active messages
(pingpong), of tagged send/recv between user buffers (p2p, with the
bidirectional bandwidth too), or of one-sided operations on the peer's
registered memory (put, get), or of the one-sided layer on the symmetric
heap (shmem-put: put then quiet, shmem-get, shmem-atomic: 64-bit
fetch-add, shmem: the three), 8 B to 4 MiB. `layer` alternates blocks of
the active-message and the tagged ping-pong in one job, and reports what
the tagged one adds to a half round trip (8 B unless --sizes says
otherwise). `registration` times rendezvous from reused
and from fresh buffers, cache hits and misses, and munmap of watched and
unwatched memory, in alternated rounds. Run it under `fireopal run -n 2`,
or alone to reach this process itself.

  --btl NAME            the transports to use (sets the btl parameter)
  --from SOURCE         pingpong only: where messages above the eager limit
                        are sent from: auto (default), buffer, heap, user,
                        copy or registered
  --sizes N[,N]...      pingpong, p2p, layer, put, get, shmem-put and
                        shmem-get: these message sizes in bytes, not the
                        default 0 B (8 B for shmem) to 4 MiB (8 B for layer)
  --rounds N            registration and layer: alternated rounds (default
                        5 for registration, 25 for layer)
  --json                print the results as JSON
  --quick               fewer iterations, to check that it runs
  --param name=value    set a parameter
";

/// The benchmarks, by the name `fireopal bench` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    PingPong,
    P2p,
    Layer,
    Registration,
    Rma(rma::Op),
    Shmem(&'static [shmem::Op]),
}

const KINDS: [(&str, Kind); 10] = [
    ("pingpong", Kind::PingPong),
    ("p2p", Kind::P2p),
    ("layer", Kind::Layer),
    ("registration", Kind::Registration),
    ("put", Kind::Rma(rma::Op::Put)),
    ("get", Kind::Rma(rma::Op::Get)),
    (
        "shmem",
        Kind::Shmem(&[shmem::Op::Put, shmem::Op::Get, shmem::Op::FetchAdd]),
    ),
    ("shmem-put", Kind::Shmem(&[shmem::Op::Put])),
    ("shmem-get", Kind::Shmem(&[shmem::Op::Get])),
    ("shmem-atomic", Kind::Shmem(&[shmem::Op::FetchAdd])),
];

const FROM: [(&str, From); 6] = [
    ("auto", From::Auto),
    ("buffer", From::Buffer),
    ("heap", From::Heap),
    ("user", From::User),
    ("copy", From::Copy),
    ("registered", From::Registered),
];

/// A parsed `fireopal bench` command line.
#[derive(Debug)]
struct Bench {
    kind: Kind,
    common: CommonArgs,
    json: bool,
    quick: bool,
    from: From,
    rounds: usize,
    /// `--sizes`: only these message sizes (pingpong, p2p, layer, put,
    /// get, the symmetric-heap puts and gets).
    sizes: Option<Vec<usize>>,
}

fn parse(args: &[String]) -> Result<Bench, Stop> {
    let mut it = Args::new(args);
    let names = || args::one_of(KINDS.iter().map(|(name, _)| *name));
    let kind = match it.next()? {
        Some(Arg::Word(w)) => match KINDS.iter().find(|(name, _)| *name == w) {
            Some(&(_, kind)) => kind,
            None => {
                return Err(Stop::Usage(format!(
                    "unknown benchmark {w:?}: expected {}",
                    names()
                )))
            }
        },
        _ => {
            return Err(Stop::Usage(format!(
                "which benchmark? expected {}",
                names()
            )))
        }
    };
    let mut b = Bench {
        kind,
        common: CommonArgs::default(),
        json: false,
        quick: false,
        from: From::Auto,
        rounds: if kind == Kind::Layer { 25 } else { 5 },
        sizes: None,
    };
    let mut btl = None;
    while let Some(arg) = it.next()? {
        if b.common.take(arg, &mut it)? {
            continue;
        }
        match arg {
            Arg::Opt("--json") => b.json = true,
            Arg::Opt("--quick") => b.quick = true,
            Arg::Opt("--btl") => btl = Some(it.value()?.to_owned()),
            Arg::Opt("--from") if kind == Kind::PingPong => b.from = it.choice(&FROM)?,
            Arg::Opt("--sizes")
                if matches!(
                    kind,
                    Kind::P2p | Kind::Layer | Kind::PingPong | Kind::Rma(_) | Kind::Shmem(_)
                ) =>
            {
                let v = it.value()?;
                let sizes: Option<Vec<usize>> =
                    v.split(',').map(|n| n.trim().parse().ok()).collect();
                b.sizes = Some(sizes.filter(|s| !s.is_empty()).ok_or_else(|| {
                    Stop::Usage(format!(
                        "--sizes {v}: expected byte counts separated by commas"
                    ))
                })?);
            }
            Arg::Opt("--rounds") if matches!(kind, Kind::Registration | Kind::Layer) => {
                let v = it.value()?;
                b.rounds = v.parse().ok().filter(|&r| r > 0).ok_or_else(|| {
                    Stop::Usage(format!("--rounds {v}: expected a count above 0"))
                })?;
            }
            other => return Err(args::unknown(other)),
        }
    }
    if let Some(name) = btl {
        b.common.params.push(("btl".to_owned(), name));
    }
    Ok(b)
}

/// Where messages above the eager limit are sent from (`--from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// `Buffer` where the transport offers transfer buffers, else
    /// `Registered` where it offers `get`, else `Copy`.
    Auto,
    /// A transfer buffer when the transport offers them, else `Copy`.
    Buffer,
    /// A symmetric-heap object, the heap registered with the messenger.
    Heap,
    /// Ordinary memory, sent in place.
    User,
    /// Ordinary memory, sent with `send`.
    Copy,
    /// Registered memory, announced and read by the receiver with `get`.
    Registered,
}

/// One row of results.
#[derive(Debug, Clone, Copy)]
struct Row {
    size: usize,
    latency_us: f64,
    bandwidth_mbs: f64,
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let b = match parse(args) {
        Ok(b) => b,
        Err(stop) => return stop.exit("fireopal bench", USAGE),
    };
    let done = match b.kind {
        Kind::PingPong => run(&b.common, b.json, b.quick, b.from, b.sizes.as_deref()),
        Kind::P2p => p2p::run(&b.common, b.json, b.quick, b.sizes.as_deref()),
        Kind::Layer => layer::run(&b.common, b.json, b.quick, b.rounds, b.sizes.as_deref()),
        Kind::Registration => registration::run(&b.common, b.json, b.quick, b.rounds),
        Kind::Rma(op) => rma::run(op, &b.common, b.json, b.quick, b.sizes.as_deref()),
        Kind::Shmem(ops) => shmem::run(ops, &b.common, b.json, b.quick, b.sizes.as_deref()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.exit("fireopal bench"),
    }
}

/// A job of one or two ranks on the runtime's front door, and the rank
/// measured against (the other one, or this one alone).
struct FrontDoor {
    rt: fireopal::Runtime,
    world: fireopal::p2p::Communicator,
    rank: u32,
    size: u32,
    peer: u32,
    /// The module carrying traffic to `peer`, as `component[index]`.
    module: String,
}

/// Starts the runtime for benchmark `what`, with blocking calls that give
/// up after [`STALL`].
fn open_front_door(common: &CommonArgs, what: &str) -> Result<FrontDoor, Failure> {
    let options = || Options {
        command_line: common.params.clone(),
        ..Options::default()
    };
    let mut rt = fireopal::Runtime::init_with(options()).map_err(|e| match e {
        // Which components there are, for a component asked for by name.
        RuntimeError::Components(e) => discovery_failure(&Registry::discover(&options()), &e),
        e => Failure::Run(e.to_string()),
    })?;
    let world = rt.world();
    let (rank, size) = (world.rank(), world.size());
    if size > 2 {
        return Err(format!("{what} needs 1 or 2 ranks, this job has {size}").into());
    }
    let peer = if size == 1 { 0 } else { 1 - rank };
    let route = rt
        .messenger()
        .route(peer)
        .ok_or_else(|| unreachable_report(rt.registry(), peer))?;
    let module = format!("{}[{}]", route.component, route.index);
    rt.p2p().set_stall_limit(Some(STALL));
    Ok(FrontDoor {
        rt,
        world,
        rank,
        size,
        peer,
        module,
    })
}

fn run(
    common: &CommonArgs,
    json: bool,
    quick: bool,
    from: From,
    only: Option<&[usize]>,
) -> Result<(), Failure> {
    let sizes = only.unwrap_or(&SIZES);
    let FrontDoor {
        mut rt,
        rank,
        size,
        peer,
        module,
        ..
    } = open_front_door(common, "pingpong")?;
    // Active messages go through the layer's messenger; `--from
    // registered` sends large messages through the layer itself.
    let m = rt.messenger();

    let pings = Rc::new(Cell::new(0u64));
    let acks = Rc::new(Cell::new(0u64));
    let largest = sizes.iter().copied().max().unwrap_or(0);
    {
        let pings = Rc::clone(&pings);
        // Received bytes land in a user buffer, as MPI_Recv puts them, so
        // the figures compare with the MPI libraries' on the same pattern.
        let mut landing = vec![0u8; largest];
        m.register(TAG_PING, move |msg| {
            if let Some(dst) = landing.get_mut(..msg.payload.len()) {
                fireopal_core::copy::copy_bytes(dst, msg.payload);
            }
            pings.set(pings.get() + 1);
        })
        .map_err(|e| e.to_string())?;
        let acks = Rc::clone(&acks);
        m.register(TAG_ACK, move |_| acks.set(acks.get() + 1))
            .map_err(|e| e.to_string())?;
    }
    // Checked where the bench checks them (`--from registered`).
    let buf = pattern(largest);
    let attrs = m.attributes(peer);
    let eager = attrs.map_or(u64::MAX, |a| a.eager_limit);
    let flags = attrs.map(|a| a.flags).unwrap_or_default();
    // The heap outlives `source`, which may point into it.
    let heap;
    let mut heap_segment = None;
    let mut source = Source {
        bytes: &buf,
        path: Path::Copy,
        eager,
        label: "ordinary memory, copied by send".into(),
    };
    let single_copy = BtlFlags::SEND_IN_PLACE | BtlFlags::TRANSFER_BUFFERS;
    let from = match from {
        From::Auto if flags.contains(single_copy) => From::Buffer,
        From::Auto if flags.contains(BtlFlags::GET) => From::Registered,
        From::Auto => From::Copy,
        chosen => chosen,
    };
    match from {
        From::Buffer if flags.contains(single_copy) => {
            let tb = m
                .alloc_transfer_buffer(peer, largest)
                .map_err(|e| e.to_string())?;
            m.write_transfer_buffer(&tb, 0, &buf)
                .map_err(|e| e.to_string())?;
            source.path = Path::Transfer(tb);
            source.label = "a transfer buffer, sent in place".into();
        }
        From::Auto | From::Buffer | From::Copy => {}
        From::User => {
            source.path = Path::InPlace;
            source.label = "ordinary memory, sent in place".into();
        }
        From::Heap => {
            let bytes = (largest as u64 + (1 << 20)).next_multiple_of(1 << 20);
            heap = SymmetricHeap::with_size(rt.registry(), bytes).map_err(|e| e.to_string())?;
            heap_segment = Some(
                rt.messenger()
                    .register_symmetric_heap(&heap)
                    .map_err(|e| e.to_string())?,
            );
            source.bytes = heap_object(&heap, &buf)?;
            source.path = Path::InPlace;
            source.label = "a symmetric-heap object, sent in place".into();
        }
        From::Registered => {
            if !flags.contains(BtlFlags::GET) {
                return Err(format!("{module} has no get, which --from registered needs").into());
            }
            source.path = Path::Tagged(Tagged::new(rt.world(), peer, largest));
            let read = "tagged messages, read by the receiver with get (rendezvous)";
            // A route may read only from a size above its eager limit
            // (shm): the point-to-point layer pipelines the ones under it.
            source.label = match attrs.map_or(0, |a| a.min_rdma_pipeline_size) {
                min if min > eager.saturating_add(1) => format!(
                    "{read} from {}, pipelined under it",
                    human_size(usize::try_from(min).unwrap_or(usize::MAX))
                ),
                _ => read.into(),
            };
        }
    }
    // A message for a tag the peer has not registered yet would be
    // dropped: both sides finish their setup before the first one leaves.
    rt.bootstrap().barrier().map_err(|e| e.to_string())?;
    let p = rt.p2p();
    let (mut pings, mut acks) = (Arrivals::new(pings), Arrivals::new(acks));
    let mut rows = Vec::new();
    for &n in sizes {
        let (iters, warmup) = latency_iterations(n, quick);
        let t = pingpong(p, rank, size, peer, &source, n, iters, warmup, &mut pings)?;
        let latency_us = t.as_secs_f64() * 1e6 / (2.0 * iters as f64);
        let windows = bandwidth_windows(n, quick);
        let t = stream(
            p, rank, size, peer, &source, n, windows, &mut pings, &mut acks,
        )?;
        let bytes = (n * WINDOW * windows) as f64;
        let bandwidth_mbs = bytes / t.as_secs_f64() / 1e6;
        rows.push(Row {
            size: n,
            latency_us,
            bandwidth_mbs,
        });
    }
    if let Path::Tagged(t) = &source.path {
        t.finish(p, &buf)?;
    }
    let m = p.messenger();
    drain_sends(m)?;
    let from_text = source.label;
    match source.path {
        Path::Transfer(tb) => m.free_transfer_buffer(tb).map_err(|e| e.to_string())?,
        Path::Tagged(_) | Path::Copy | Path::InPlace => {}
    }
    if let Some(segment) = heap_segment {
        m.unregister_segment(segment).map_err(|e| e.to_string())?;
    }
    rt.bootstrap().barrier().map_err(|e| e.to_string())?;
    if rank == 0 {
        if json {
            println!("{}", to_json(&rows, &module, size, &from_text).render());
        } else {
            print!("{}", to_table(&rows, &module, size, &from_text));
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

fn latency_iterations(n: usize, quick: bool) -> (usize, usize) {
    let iters = match n {
        0..=8192 => 20_000,
        8193..=65536 => 5_000,
        65537..=1_048_576 => 500,
        _ => 100,
    };
    let iters = if quick { (iters / 20).max(5) } else { iters };
    (iters, (iters / 10).max(2))
}

fn bandwidth_windows(n: usize, quick: bool) -> usize {
    let windows = match n {
        0..=8192 => 400,
        8193..=65536 => 100,
        65537..=1_048_576 => 20,
        _ => 8,
    };
    if quick {
        (windows / 10).max(2)
    } else {
        windows
    }
}

/// Progresses until `counter` reaches `target`, with a stall limit;
/// through the point-to-point layer when it carries messages (`layer`),
/// else through the messenger alone.
fn wait_serving(p: &mut P2p, counter: &Cell<u64>, target: u64, layer: bool) -> Result<(), String> {
    let mut watch = StallWatch::new(STALL);
    while counter.get() < target {
        let events = if layer {
            p.progress().map_err(|e| e.to_string())?
        } else {
            p.messenger().progress().map_err(|e| e.to_string())?
        };
        let m = p.messenger();
        if let Some((peer, why)) = m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} failed: {why}"));
        }
        for (_, status) in m.take_completions() {
            status.map_err(|e| e.to_string())?;
        }
        if watch.stalled(events) {
            return Err(format!(
                "no message for {} s: is the peer alive?",
                STALL.as_secs()
            ));
        }
    }
    Ok(())
}

/// Why no transport reaches `peer`: every transport this process saw
/// but cannot use, with its reason (a plugin built against another
/// interface shows up here rather than as a silent absence).
fn unreachable_report(registry: &Registry, peer: u32) -> String {
    let mut report = format!("no transport reaches rank {peer}");
    for c in registry.components() {
        if c.framework() == Framework::Btl && !matches!(c.status(), Status::Available { .. }) {
            report.push_str(&format!("\n  btl {}: {}", c.name(), c.status()));
        }
    }
    report
}

/// A block of the symmetric heap holding a copy of `data`, as a slice
/// that lives as long as the heap.
#[allow(unsafe_code)]
fn heap_object<'h>(heap: &'h SymmetricHeap, data: &[u8]) -> Result<&'h [u8], String> {
    let block = heap
        .try_align(64, data.len().max(1))
        .map_err(|e| e.to_string())?;
    // SAFETY: a fresh block of at least `data.len()` bytes that nothing
    // else uses; it is never freed while the heap lives (the heap is
    // dropped with the whole segment), and nothing writes it after this.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), block.as_ptr(), data.len());
        Ok(std::slice::from_raw_parts(block.as_ptr(), data.len()))
    }
}

/// How messages above the eager limit leave.
enum Path {
    /// `send`: copied before it returns.
    Copy,
    /// `send_in_place` from where the bytes are.
    InPlace,
    /// `send_from_transfer_buffer`.
    Transfer(TransferBufferHandle),
    /// Tagged point-to-point messages (the layer's rendezvous).
    Tagged(Tagged),
}

/// Where the bench's payloads come from: the first `n` bytes of `bytes`,
/// sent along `path` above the eager limit and with `send` below it.
struct Source<'a> {
    bytes: &'a [u8],
    path: Path,
    eager: u64,
    /// What the report says about large messages.
    label: String,
}

impl Source<'_> {
    #[allow(unsafe_code)]
    fn send(&self, p: &mut P2p, peer: u32, tag: u8, n: usize) -> Result<(), String> {
        let bytes = self.bytes.get(..n).unwrap_or(self.bytes);
        if let Path::Tagged(t) = &self.path {
            if n as u64 > self.eager {
                return t.send(p, bytes);
            }
        }
        let m = p.messenger();
        let ticket = match &self.path {
            _ if n as u64 <= self.eager => m.send(peer, tag, &[], bytes),
            Path::Copy => m.send(peer, tag, &[], bytes),
            Path::Transfer(buffer) => m.send_from_transfer_buffer(peer, tag, &[], buffer, n),
            Path::InPlace => {
                // SAFETY: `bytes` is borrowed for the whole bench, never
                // written, and every send is drained before it goes.
                let region = unsafe { MemRegion::new(bytes.as_ptr().cast_mut(), bytes.len()) };
                m.send_in_place(peer, tag, &[], region)
            }
            Path::Tagged(_) => m.send(peer, tag, &[], bytes),
        };
        match ticket.map_err(|e| e.to_string())? {
            SendTicket::Done | SendTicket::Pending(_) => Ok(()),
        }
    }

    /// Waits for the next `k` messages of `from`, of `n` bytes each:
    /// received by the tagged receives when large messages go as tagged
    /// messages (an acknowledgement's `n` is 0).
    fn wait_next(&self, p: &mut P2p, from: &mut Arrivals, k: u64, n: usize) -> Result<(), String> {
        let target = from.expect(k);
        let counter = &*from.count;
        match &self.path {
            Path::Tagged(t) if n as u64 > self.eager => t.receive(p, counter, target, n),
            Path::Tagged(_) => wait_serving(p, counter, target, true),
            _ => wait_serving(p, counter, target, false),
        }
    }
}

fn send(m: &mut Messenger, peer: u32, tag: u8, payload: &[u8]) -> Result<(), String> {
    match m.send(peer, tag, &[], payload).map_err(|e| e.to_string())? {
        SendTicket::Done | SendTicket::Pending(_) => Ok(()),
    }
}

/// Progresses until every send has completed, failing at the first that
/// failed or once nothing happened for [`STALL`].
fn drain_sends(m: &mut Messenger) -> Result<(), String> {
    let mut failed = None;
    m.wait_until(
        |m| {
            for (_, status) in m.take_completions() {
                if let Err(e) = status {
                    failed.get_or_insert_with(|| e.to_string());
                }
            }
            failed.is_some() || m.drained()
        },
        STALL,
    )
    .map_err(|e| format!("sends did not complete: {e}"))?;
    failed.map_or(Ok(()), Err)
}

// Not inlined, so that a profiler can count the ping-pong on its own.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn pingpong(
    m: &mut P2p,
    rank: u32,
    size: u32,
    peer: u32,
    payload: &Source<'_>,
    n: usize,
    iters: usize,
    warmup: usize,
    pings: &mut Arrivals,
) -> Result<Duration, String> {
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        if size == 1 {
            // One process: a round trip is two one-way trips to itself.
            payload.send(m, peer, TAG_PING, n)?;
            payload.wait_next(m, pings, 1, n)?;
            payload.send(m, peer, TAG_PING, n)?;
            payload.wait_next(m, pings, 1, n)?;
        } else if rank == 0 {
            payload.send(m, peer, TAG_PING, n)?;
            payload.wait_next(m, pings, 1, n)?;
        } else {
            payload.wait_next(m, pings, 1, n)?;
            payload.send(m, peer, TAG_PING, n)?;
        }
    }
    Ok(start.elapsed())
}

/// The messages of one tag from the peer: the handler counts them as
/// they arrive, and `due` is how many the pattern has had the peer send
/// so far. A wait is for `due` arrivals, not for one more than the count
/// seen before it: a message that came early (while this side still
/// drove its own last send, or the block before) is then not waited for
/// a second time.
struct Arrivals {
    count: Rc<Cell<u64>>,
    due: u64,
}

impl Arrivals {
    fn new(count: Rc<Cell<u64>>) -> Self {
        Self { count, due: 0 }
    }

    /// Counts `k` more messages the peer sends: the arrivals that mean
    /// all of them are in.
    fn expect(&mut self, k: u64) -> u64 {
        self.due += k;
        self.due
    }
}

#[allow(clippy::too_many_arguments)]
fn stream(
    m: &mut P2p,
    rank: u32,
    size: u32,
    peer: u32,
    payload: &Source<'_>,
    n: usize,
    windows: usize,
    pings: &mut Arrivals,
    acks: &mut Arrivals,
) -> Result<Duration, String> {
    let start = Instant::now();
    for _ in 0..windows {
        if size == 1 || rank == 0 {
            for _ in 0..WINDOW {
                payload.send(m, peer, TAG_PING, n)?;
            }
        }
        if size == 1 || rank == 1 {
            payload.wait_next(m, pings, WINDOW as u64, n)?;
            send(m.messenger(), peer, TAG_ACK, &[])?;
        }
        if size == 1 || rank == 0 {
            payload.wait_next(m, acks, 1, 0)?;
        }
    }
    Ok(start.elapsed())
}

/// `len` bytes that are not one repeated value (a prime period), so that
/// a transport that moves the wrong bytes is caught where they are checked.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// `n` in the largest unit it is a whole number of (`65600 B`, `64 KiB`,
/// `1 MiB`), so that no two sizes print alike.
fn human_size(n: usize) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

fn to_table(rows: &[Row], module: &str, size: u32, from: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# fireopal pingpong: {} over btl {module}; above the eager limit: {from}",
        if size == 1 {
            "one process to itself"
        } else {
            "rank 0 <-> rank 1"
        }
    );
    write_rows(&mut out, rows);
    out
}

/// The table's column heads and one line per row.
fn write_rows(out: &mut String, rows: &[Row]) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "{:>10} {:>14} {:>16}",
        "size", "latency (us)", "bandwidth (MB/s)"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:>10} {:>14.2} {:>16.1}",
            human_size(r.size),
            r.latency_us,
            r.bandwidth_mbs
        );
    }
}

fn to_json(rows: &[Row], module: &str, size: u32, from: &str) -> Json {
    Json::Obj(vec![
        ("benchmark", Json::str("pingpong")),
        ("btl", Json::str(module)),
        ("large_messages_from", Json::str(from)),
        ("ranks", Json::Int(i128::from(size))),
        ("results", rows_json(rows)),
    ])
}

/// The rows as a JSON array.
fn rows_json(rows: &[Row]) -> Json {
    Json::Arr(
        rows.iter()
            .map(|r| {
                Json::Obj(vec![
                    ("size", Json::Int(r.size as i128)),
                    ("latency_us", Json::Float(r.latency_us)),
                    ("bandwidth_mbs", Json::Float(r.bandwidth_mbs)),
                ])
            })
            .collect(),
    )
}
