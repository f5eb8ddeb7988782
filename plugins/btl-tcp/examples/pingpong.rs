//! Ping-pong between two tcp modules in one process (one thread each),
//! with the OSU pattern that `fireopal bench pingpong` will use:
//! latency = half the round trip of a blocking ping-pong, averaged after
//! warm-up; bandwidth = windows of 64 back-to-back sends, one small
//! acknowledgement per window. A third column does the bandwidth pattern
//! with `put` into a registered buffer of the peer (a window completes when
//! every put of it has completed).
//!
//! ```text
//! cargo run --release -p fireopal-btl-tcp --example pingpong [-- --param name=value ...] [--size bytes ...]
//! ```
//!
//! It prints figures only; it checks nothing.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use abi_stable::std_types::{ROption, RSlice, RStr};
use fireopal_abi::btl::{
    Access, BtlComponentImpl, EventSink, MemRegion, PeerAddress, Rank, RdmaOp, SendiOutcome,
    Transport,
};
use fireopal_abi::host::{Host, HostServices, JobInfo, LogLevel};
use fireopal_abi::param::ParamValue;
use fireopal_abi::PluginError;
use fireopal_btl_tcp::{TcpComponent, TcpModule};

#[derive(Clone)]
struct BenchHost {
    params: Arc<HashMap<String, ParamValue>>,
    job: JobInfo,
}

impl HostServices for BenchHost {
    fn param(&self, name: RStr<'_>) -> ROption<ParamValue> {
        self.params.get(name.as_str()).cloned().into()
    }
    fn job(&self) -> JobInfo {
        self.job
    }
    fn log(&self, level: LogLevel, message: RStr<'_>) {
        if level <= LogLevel::Warn {
            eprintln!("[rank {}] {level:?}: {message}", self.job.rank);
        }
    }
}

#[derive(Default)]
struct Counter {
    msgs: usize,
    bytes: usize,
    puts: usize,
}

impl EventSink for Counter {
    fn deliver(&mut self, _: Rank, _: u8, _: &[u8], payload: &[u8]) {
        self.msgs += 1;
        self.bytes += payload.len();
    }
    fn send_complete(&mut self, _: u64, status: Result<(), PluginError>) {
        status.expect("send failed");
    }
    fn rdma_complete(&mut self, _: u64, status: Result<(), PluginError>) {
        status.expect("put failed");
        self.puts += 1;
    }
    fn peer_failed(&mut self, peer: Rank, error: PluginError) {
        panic!("rank {peer} failed: {error}");
    }
}

struct Side {
    m: TcpModule,
    sink: Counter,
    peer: Rank,
    /// Messages this side must have received by now (counted from the
    /// start, so a message that arrives early is never missed).
    expect: usize,
}

impl Side {
    /// Sends as a host would: `sendi` first, `send` when it is Busy (a
    /// `send` completion, if any, is only checked for errors).
    fn post(&mut self, payload: &[u8]) {
        if self.m.sendi(self.peer, 1, b"", payload).expect("sendi") == SendiOutcome::Busy {
            self.m.send(self.peer, 1, b"", payload, 0).expect("send");
        }
    }

    /// Waits for `more` messages beyond those already expected.
    fn wait_more(&mut self, more: usize) {
        self.expect += more;
        self.wait(self.expect);
    }

    fn wait(&mut self, msgs: usize) {
        let start = Instant::now();
        let mut warned = false;
        let mut spins = 0u32;
        while self.sink.msgs < msgs {
            self.m.progress(&mut self.sink).expect("progress");
            spins = spins.wrapping_add(1);
            if !warned && spins % 4096 == 0 && start.elapsed() > Duration::from_secs(5) {
                warned = true;
                eprintln!(
                    "stuck waiting for message {msgs}: have {}, {} bytes queued, {} connections",
                    self.sink.msgs,
                    self.m.queued_bytes(self.peer),
                    self.m.connection_count()
                );
            }
        }
    }

    fn drain(&mut self) {
        while self.m.queued_bytes(self.peer) > 0 {
            self.m.progress(&mut self.sink).expect("progress");
        }
    }
}

const SIZES: [usize; 8] = [0, 8, 64, 1 << 10, 8 << 10, 64 << 10, 1 << 20, 4 << 20];
const WINDOW: usize = 64;

fn iterations(size: usize) -> (usize, usize) {
    match size {
        0..=8192 => (20_000, 2_000),
        8193..=65536 => (5_000, 500),
        _ => (300, 30),
    }
}

fn run(
    sizes: &[usize],
    rank: Rank,
    params: Arc<HashMap<String, ParamValue>>,
    tx: mpsc::Sender<Vec<u8>>,
    rx: mpsc::Receiver<Vec<u8>>,
    done: Arc<Barrier>,
) -> Vec<(usize, f64, f64, f64)> {
    let host = Host::from_impl(BenchHost {
        params,
        job: JobInfo {
            rank,
            size: 2,
            local_rank: rank,
            local_size: 2,
            job_key: [7; 32],
        },
    });
    let mut m = TcpComponent::open(host).expect("open").remove(0);
    tx.send(m.address().unwrap()).unwrap();
    let theirs = rx.recv().unwrap();
    let peer = 1 - rank;
    m.add_peers(&[PeerAddress {
        rank: peer,
        node_local: true,
        address: RSlice::from_slice(&theirs),
    }])
    .unwrap();
    // Rank 1 lends a buffer for rank 0's puts.
    let mut target = vec![0u8; 4 << 20];
    let key = if rank == 1 {
        // SAFETY: `target` outlives the module (dropped after it at the
        // end of this function) and is not touched while registered.
        let region = unsafe { MemRegion::new(target.as_mut_ptr(), target.len()) };
        let reg = m.register_mem(region, Access::REMOTE_WRITE).unwrap();
        tx.send([&(target.as_ptr() as u64).to_le_bytes()[..], &reg.remote_key].concat())
            .unwrap();
        Vec::new()
    } else {
        rx.recv().unwrap()
    };
    let mut s = Side {
        m,
        sink: Counter::default(),
        peer,
        expect: 0,
    };
    let mut results = Vec::new();
    for &size in sizes {
        let trace = std::env::var_os("PINGPONG_TRACE").is_some();
        if trace {
            eprintln!("rank {rank}: size {size}");
        }
        let buf = vec![0x5au8; size];
        let (iters, warmup) = iterations(size);
        // Latency.
        let mut start = Instant::now();
        for i in 0..iters + warmup {
            if i == warmup {
                start = Instant::now();
            }
            if rank == 0 {
                s.post(&buf);
                s.wait_more(1);
            } else {
                s.wait_more(1);
                s.post(&buf);
            }
        }
        let latency_us = start.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
        // Bandwidth.
        // About 2 GiB per size for large messages, 100 windows for small.
        let windows = ((2usize << 30) / (WINDOW * size.max(1))).clamp(5, 100);
        let mut start = Instant::now();
        let mut bytes = 0usize;
        for w in 0..windows + 2 {
            if w == 2 {
                start = Instant::now();
                bytes = 0;
            }
            if rank == 0 {
                for _ in 0..WINDOW {
                    s.post(&buf);
                }
                s.drain();
                s.wait_more(1);
                bytes += WINDOW * size;
            } else {
                s.wait_more(WINDOW);
                s.post(&[]);
            }
        }
        let gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
        if trace {
            eprintln!("rank {rank}: size {size} put phase");
        }
        // Bandwidth with put.
        let mut src = vec![0x33u8; size];
        let mut put_gbps = 0.0;
        if rank == 0 {
            let addr = u64::from_le_bytes(key[..8].try_into().unwrap());
            // SAFETY: `src` lives until the loop below has seen every put
            // complete.
            let local = unsafe { MemRegion::new(src.as_mut_ptr(), src.len()) };
            let op = RdmaOp {
                peer,
                local,
                local_registration: u64::MAX,
                remote_addr: addr,
                remote_key: key[8..].into(),
                cookie: 0,
            };
            let mut start = Instant::now();
            for w in 0..windows + 2 {
                if w == 2 {
                    start = Instant::now();
                }
                let seen = s.sink.puts;
                for _ in 0..WINDOW {
                    s.m.put(&op).expect("put");
                }
                while s.sink.puts < seen + WINDOW {
                    s.m.progress(&mut s.sink).expect("progress");
                }
            }
            put_gbps = (windows * WINDOW * size) as f64 / start.elapsed().as_secs_f64() / 1e9;
            s.post(&[]);
        } else {
            s.wait_more(1);
        }
        drop(src);
        results.push((size, latency_us, gbps, put_gbps));
    }
    // Neither side closes its connection while the other still runs.
    done.wait();
    drop(s);
    drop(target);
    results
}

fn main() {
    let mut params: HashMap<String, ParamValue> = HashMap::new();
    params.insert(
        "btl_tcp_if_include".into(),
        ParamValue::Str("127.0.0.1".into()),
    );
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--size" {
            sizes.push(
                args.next()
                    .and_then(|s| s.parse().ok())
                    .expect("--size bytes"),
            );
        } else if a == "--param" {
            let kv = args.next().expect("--param name=value");
            let (k, v) = kv.split_once('=').expect("name=value");
            let value = match v.parse::<u64>() {
                Ok(n)
                    if k.ends_with("buf")
                        || k.ends_with("size")
                        || k.ends_with("limit")
                        || k.ends_with("staging") =>
                {
                    ParamValue::Size(n)
                }
                Ok(n) => ParamValue::UInt(n),
                Err(_) => ParamValue::Str(v.into()),
            };
            params.insert(k.to_owned(), value);
        }
    }
    if sizes.is_empty() {
        sizes = SIZES.to_vec();
    }
    let params = Arc::new(params);
    let s1 = sizes.clone();
    let (tx0, rx1) = mpsc::channel();
    let (tx1, rx0) = mpsc::channel();
    let p1 = Arc::clone(&params);
    let done = Arc::new(Barrier::new(2));
    let d1 = Arc::clone(&done);
    let other = std::thread::spawn(move || run(&s1, 1, p1, tx1, rx1, d1));
    let results = run(&sizes, 0, params, tx0, rx0, done);
    other.join().unwrap();
    println!(
        "{:>10} {:>14} {:>16} {:>16}",
        "bytes", "latency (us)", "send (GB/s)", "put (GB/s)"
    );
    for (size, lat, bw, put) in results {
        println!("{size:>10} {lat:>14.2} {bw:>16.3} {put:>16.3}");
    }
}
