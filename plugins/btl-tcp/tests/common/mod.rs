//! Test harness: jobs of several ranks whose tcp modules talk over
//! 127.0.0.1 in one thread, on the conformance crate's host and event
//! recorder, with what the tcp tests add: log reading, wrong job keys,
//! partial progress, and impostors that speak the handshake.

#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use abi_stable::std_types::RSlice;
use fireopal_abi::btl::{BtlComponentImpl, PeerAddress, Rank, Reachability, Transport};
use fireopal_abi::host::{Host, JobInfo, JOB_KEY_LEN};
use fireopal_abi::param::ParamValue;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_btl_tcp::{TcpComponent, TcpModule};
pub use fireopal_conformance::host::Logs;
pub use fireopal_conformance::pattern::pattern;
pub use fireopal_conformance::recorder::Recorder;
use fireopal_conformance::TestHost;

/// How long any one wait in a test may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(60);

pub const KEY: [u8; JOB_KEY_LEN] = [0x5a; JOB_KEY_LEN];

/// Job settings.
pub struct JobSpec {
    pub size: u32,
    pub params: Vec<(&'static str, ParamValue)>,
    /// Ranks that get a different job key.
    pub wrong_key: Vec<Rank>,
}

impl JobSpec {
    pub fn new(size: u32) -> Self {
        Self {
            size,
            params: Vec::new(),
            wrong_key: Vec::new(),
        }
    }

    pub fn param(mut self, name: &'static str, value: ParamValue) -> Self {
        self.params.push((name, value));
        self
    }
}

pub fn host_for(spec: &JobSpec, rank: Rank, key: [u8; JOB_KEY_LEN]) -> (Host, Logs) {
    let mut params = vec![(
        "btl_tcp_if_include".to_owned(),
        ParamValue::Str("127.0.0.1".into()),
    )];
    params.extend(
        spec.params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone())),
    );
    let job = JobInfo {
        rank,
        size: spec.size,
        local_rank: rank,
        local_size: spec.size,
        job_key: key,
    };
    let host = TestHost::new(job, &params);
    let logs = host.logs();
    (host.into_host(), logs)
}

/// One rank of a test job.
pub struct Proc {
    pub rank: Rank,
    pub modules: Vec<TcpModule>,
    pub logs: Logs,
    pub rec: Recorder,
}

impl Proc {
    /// The first (usually only) module.
    pub fn m(&mut self) -> &mut TcpModule {
        &mut self.modules[0]
    }

    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        for m in &mut self.modules {
            n += m.progress(&mut self.rec).expect("progress");
        }
        n
    }

    pub fn logged(&self, needle: &str) -> bool {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .any(|(_, m)| m.contains(needle))
    }

    pub fn log_text(&self) -> String {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .map(|(l, m)| format!("{l:?}: {m}\n"))
            .collect()
    }
}

/// Opens every rank's modules and adds every other rank as a peer.
pub fn job(spec: JobSpec) -> Vec<Proc> {
    let mut procs: Vec<Proc> = (0..spec.size)
        .map(|rank| {
            let key = if spec.wrong_key.contains(&rank) {
                [0xa5; JOB_KEY_LEN]
            } else {
                KEY
            };
            let (host, logs) = host_for(&spec, rank, key);
            let modules = TcpComponent::open(host).expect("open");
            assert!(!modules.is_empty());
            Proc {
                rank,
                modules,
                logs,
                rec: Recorder::default(),
            }
        })
        .collect();
    connect_all(&mut procs);
    procs
}

/// Adds every rank's module `i` address to every other rank's module `i`.
pub fn connect_all(procs: &mut [Proc]) {
    let n_modules = procs[0].modules.len();
    for i in 0..n_modules {
        let addresses: Vec<(Rank, Vec<u8>)> = procs
            .iter()
            .map(|p| (p.rank, p.modules[i].address().unwrap()))
            .collect();
        for p in procs.iter_mut() {
            let peers: Vec<PeerAddress<'_>> = addresses
                .iter()
                .map(|(rank, a)| PeerAddress {
                    rank: *rank,
                    node_local: true,
                    address: RSlice::from_slice(a),
                })
                .collect();
            let answers = p.modules[i].add_peers(&peers).unwrap();
            for (peer, answer) in peers.iter().zip(&answers) {
                if peer.rank == p.rank {
                    assert!(matches!(answer, Reachability::Unreachable(_)));
                } else {
                    assert_eq!(
                        *answer,
                        Reachability::Reachable,
                        "{} -> {}",
                        p.rank,
                        peer.rank
                    );
                }
            }
        }
    }
}

/// Progresses every rank until `done` holds; fails the test after
/// [`LIMIT`].
pub fn drive(procs: &mut [Proc], what: &str, mut done: impl FnMut(&mut [Proc]) -> bool) {
    let start = Instant::now();
    while !done(procs) {
        let mut n = 0;
        for p in procs.iter_mut() {
            n += p.progress();
        }
        if n == 0 {
            std::thread::yield_now();
        }
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
    }
}

/// Progresses only the ranks in `only`.
pub fn drive_some(
    procs: &mut [Proc],
    only: &[usize],
    what: &str,
    mut done: impl FnMut(&mut [Proc]) -> bool,
) {
    let start = Instant::now();
    while !done(procs) {
        for &i in only {
            procs[i].progress();
        }
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
    }
}

/// Progresses every rank for `time`, and at least [`SETTLE_ROUNDS`] times,
/// for things that must *not* happen.
pub fn settle(procs: &mut [Proc], time: Duration) {
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < SETTLE_ROUNDS || start.elapsed() < time {
        for p in procs.iter_mut() {
            p.progress();
        }
        rounds += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Progress rounds a [`settle`] makes however slowly the machine runs, so
/// that what would go wrong has the calls it needs to show: a few times
/// the modules' period between looks at the clock.
pub const SETTLE_ROUNDS: u32 = 256;

/// Whether an error reports a failed peer, of any of the peer-failure
/// kinds.
pub fn is_peer_failure(e: &PluginError) -> bool {
    e.kind.is_peer_failure()
}

/// Whether an error is of `kind`.
pub fn is_kind(e: &PluginError, kind: ErrorKind) -> bool {
    e.kind == kind
}

/// Sends with `sendi` when it fits and is accepted, else with `send`.
/// Returns the cookie if a completion will follow.
pub fn post(
    m: &mut TcpModule,
    peer: Rank,
    tag: u8,
    header: &[u8],
    payload: &[u8],
    cookie: u64,
) -> Option<u64> {
    use fireopal_abi::btl::{Completion, SendiOutcome};
    if m.sendi(peer, tag, header, payload).unwrap() == SendiOutcome::Sent {
        return None;
    }
    match m.send(peer, tag, header, payload, cookie).unwrap() {
        Completion::Done => None,
        Completion::Pending => Some(cookie),
    }
}

/// The listening socket of a module (its own entry of the address list).
pub fn listen_addr(m: &TcpModule) -> std::net::SocketAddr {
    let list = fireopal_core::wire::tcp::address::parse_addresses(&m.address().unwrap()).unwrap();
    let e = m.my_entry().copied().unwrap();
    assert!(list.contains(&e));
    std::net::SocketAddr::new(e.ip, e.port)
}

/// Reads exactly `n` bytes from a non-blocking stream while progressing
/// the job; `None` if the other end closed first.
pub fn read_while(
    procs: &mut [Proc],
    stream: &mut std::net::TcpStream,
    n: usize,
) -> Option<Vec<u8>> {
    use std::io::Read;
    stream.set_nonblocking(true).unwrap();
    let mut out = vec![0u8; n];
    let mut have = 0;
    let start = Instant::now();
    while have < n {
        match stream.read(&mut out[have..]) {
            Ok(0) => return None,
            Ok(k) => have += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                for p in procs.iter_mut() {
                    p.progress();
                }
            }
            Err(_) => return None,
        }
        assert!(start.elapsed() < LIMIT, "timed out reading from the module");
    }
    Some(out)
}

/// Whether the module closed `stream` (reads end or fail), progressing
/// the job meanwhile.
pub fn closed_by_module(procs: &mut [Proc], stream: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    stream.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < LIMIT {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                for p in procs.iter_mut() {
                    p.progress();
                }
            }
            Err(_) => return true,
        }
    }
    false
}

/// A process that is not a tcp module but speaks the handshake as rank
/// `me` with `key`, connected to `procs[target]`'s module 0. Returns the
/// stream after the Verdict (Accept expected when `key` is right).
pub fn fake_peer(
    procs: &mut [Proc],
    target: usize,
    me: Rank,
    key: &[u8; JOB_KEY_LEN],
) -> Result<std::net::TcpStream, String> {
    use fireopal_core::wire::tcp::handshake::{Challenge, Hello, Proof, Role, Transcript, Verdict};
    use std::io::Write;
    let addr = listen_addr(&procs[target].modules[0]);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let hello = Hello {
        link: 0,
        from_rank: me,
        to_rank: procs[target].rank,
        from_entry: 0,
        to_entry: procs[target].modules[0].my_entry().map(|_| 0).unwrap(),
        nonce: [me as u8; 32],
    };
    s.write_all(&hello.encode()).unwrap();
    let c = read_while(procs, &mut s, Challenge::LEN).ok_or("closed before the challenge")?;
    let c = Challenge::parse(&c).map_err(|e| e.to_string())?;
    let t = Transcript::new(&hello, c.nonce);
    // A fake peer does not check the acceptor's proof: it tries its luck.
    let proof = Proof {
        mac: t.mac(key, Role::Connector),
    };
    s.set_nonblocking(false).unwrap();
    s.write_all(&proof.encode()).unwrap();
    let v = read_while(procs, &mut s, Verdict::LEN).ok_or("closed before the verdict")?;
    match Verdict::parse(&v).map_err(|e| e.to_string())? {
        Verdict::Accept => {
            s.set_nonblocking(false).unwrap();
            Ok(s)
        }
        Verdict::Duplicate => Err("duplicate".into()),
    }
}
