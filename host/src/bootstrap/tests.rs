//! Client tests against fake PMI servers on socketpairs: scripted ones that
//! misbehave, and the launcher's own server state machine driven by
//! threads.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;

use super::server::PmiServer;
use super::*;

/// The server side of a scripted exchange.
struct Script {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Script {
    /// Reads one request line and checks it starts with `prefix`.
    fn expect(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        assert!(line.starts_with(prefix), "got {line:?}, expected {prefix}");
        line
    }

    fn send(&mut self, raw: &str) {
        self.send_bytes(raw.as_bytes());
    }

    fn send_bytes(&mut self, raw: &[u8]) {
        self.writer.write_all(raw).unwrap();
    }

    /// Answers the four handshake requests with Hydra's replies.
    fn handshake(&mut self) {
        self.expect("cmd=init pmi_version=1 pmi_subversion=1");
        self.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
        self.expect("cmd=get_maxes");
        self.send("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
        self.expect("cmd=get_appnum");
        self.send("cmd=appnum appnum=0\n");
        self.expect("cmd=get_my_kvsname");
        self.send("cmd=my_kvsname kvsname=kvs_test\n");
    }
}

/// Runs `script` as the server of a one-rank job in a thread; returns the
/// client's end.
fn scripted(
    script: impl FnOnce(&mut Script) + Send + 'static,
) -> (UnixStream, thread::JoinHandle<()>) {
    let (client, server) = UnixStream::pair().unwrap();
    let handle = thread::spawn(move || {
        let mut s = Script {
            reader: BufReader::new(server.try_clone().unwrap()),
            writer: server,
        };
        script(&mut s);
    });
    (client, handle)
}

/// A rank-0-of-1 init that answers the exchange inside `init` properly.
fn init_exchange(s: &mut Script) {
    s.handshake();
    let mut stored = Vec::new();
    loop {
        let line = s.expect("cmd=");
        if line.starts_with("cmd=put") {
            stored.push(line);
            s.send("cmd=put_result rc=0 msg=success\n");
        } else {
            assert!(line.starts_with("cmd=barrier_in"), "{line}");
            s.send("cmd=barrier_out\n");
            break;
        }
    }
    assert_eq!(stored.len(), 2, "node identity and job key");
}

fn init_error(script: impl FnOnce(&mut Script) + Send + 'static) -> InitError {
    let (client, handle) = scripted(script);
    let err = Bootstrap::over_pmi(client, 0, 1).unwrap_err();
    handle.join().unwrap();
    err
}

#[test]
fn malformed_reply_is_an_error() {
    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("hello there\n");
    });
    assert!(
        matches!(
            err,
            InitError::Wire(WireError::Malformed { during: "init", .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("malformed PMI reply to init"),
        "{err}"
    );

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
        s.expect("cmd=get_maxes");
        s.send("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=lots\n");
    });
    assert!(
        err.to_string().contains("vallen_max is not an integer"),
        "{err}"
    );

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=barrier_out\n");
    });
    assert!(
        matches!(
            err,
            InitError::Wire(WireError::Unexpected {
                expected: "response_to_init",
                ..
            })
        ),
        "{err:?}"
    );

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n");
    });
    assert!(
        matches!(
            err,
            InitError::Wire(WireError::Rejected {
                during: "init",
                rc: -1,
                ..
            })
        ),
        "{err:?}"
    );

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n");
    });
    assert!(err.to_string().contains("PMI version 2"), "{err}");
    assert!(
        matches!(
            err,
            InitError::Wire(WireError::Malformed {
                reason: Malformed::Version(2),
                ..
            })
        ),
        "{err:?}"
    );

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send(&"x".repeat(wire::MAX_LINE + 10));
    });
    assert!(err.to_string().contains("longer than"), "{err}");

    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send_bytes(b"cmd=response_to_init \xe2\x82 rc=0\n");
    });
    assert!(err.to_string().contains("UTF-8"), "{err}");
}

#[test]
fn socket_closed_mid_exchange_is_an_error() {
    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
        s.expect("cmd=get_maxes");
        // Half a reply, then the server goes away.
        s.send("cmd=maxes kvsname_max=2");
    });
    assert!(
        matches!(
            err,
            InitError::Wire(WireError::Closed {
                during: "get_maxes"
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "bootstrap init: PMI server closed the connection during get_maxes"
    );

    // Closed while the rank waits in a fence.
    let (client, handle) = scripted(|s| {
        init_exchange(s);
        s.expect("cmd=barrier_in");
    });
    let mut boot = Bootstrap::over_pmi(client, 0, 1).unwrap();
    let err = boot.fence().unwrap_err();
    assert!(
        matches!(
            err,
            WireError::Closed {
                during: "barrier_in"
            }
        ),
        "{err:?}"
    );
    handle.join().unwrap();
}

#[test]
fn launcher_limits_are_checked() {
    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
        s.expect("cmd=get_maxes");
        s.send("cmd=maxes kvsname_max=256 keylen_max=16 vallen_max=1024\n");
    });
    assert!(
        matches!(
            err,
            InitError::LauncherLimits {
                keylen_max: 16,
                vallen_max: 1024
            }
        ),
        "{err:?}"
    );
    let err = init_error(|s| {
        s.expect("cmd=init");
        s.send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
        s.expect("cmd=get_maxes");
        s.send("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=-5\n");
    });
    assert!(err.to_string().contains("vallen_max=-5"), "{err}");
}

#[test]
fn bad_replies_to_get_and_put_are_errors() {
    let (client, handle) = scripted(|s| {
        init_exchange(s);
        // A put the server refuses.
        s.expect("cmd=put kvsname=kvs_test key=fo.0.a value=1x01");
        s.send("cmd=put_result rc=-1 msg=duplicate_key\n");
        // rc=0 but no value.
        s.expect("cmd=get kvsname=kvs_test key=fo.0.a");
        s.send("cmd=get_result rc=0 msg=success\n");
        // A value that is not in fireopal's layout.
        s.expect("cmd=get kvsname=kvs_test key=fo.0.a");
        s.send("cmd=get_result rc=0 value=zz\n");
        // A first chunk announcing more data than arrives.
        s.expect("cmd=get kvsname=kvs_test key=fo.0.a");
        s.send("cmd=get_result rc=0 value=4x0102\n");
        s.expect("cmd=get kvsname=kvs_test key=fo.0.a.1");
        s.send("cmd=get_result rc=-1 msg=key_not_found\n");
        // Not found.
        s.expect("cmd=get kvsname=kvs_test key=fo.0.a");
        s.send("cmd=get_result rc=-1 msg=key_fo.0.a_not_found value=unknown\n");
        // A non-numeric rc.
        s.expect("cmd=barrier_in");
        s.send("cmd=barrier_out rc=oops\n");
    });
    let mut boot = Bootstrap::over_pmi(client, 0, 1).unwrap();
    assert!(
        matches!(boot.launcher(), Launcher::Pmi1 { kvsname, appnum: 0 } if kvsname == "kvs_test")
    );
    let err = boot.put("a", &[1]).unwrap_err();
    assert!(
        matches!(err, PutError::Wire(WireError::Rejected { rc: -1, .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("duplicate_key"), "{err}");
    let err = boot.get(0, "a").unwrap_err();
    assert!(err.to_string().contains("field value is missing"), "{err}");
    assert!(
        matches!(
            err,
            GetError::Wire(WireError::Malformed {
                during: "get",
                reason: Malformed::MissingField("value"),
            })
        ),
        "{err:?}"
    );
    let err = boot.get(0, "a").unwrap_err();
    assert!(
        matches!(
            err,
            GetError::Corrupt {
                rank: 0,
                reason: CorruptValue::NoHeader,
                ..
            }
        ),
        "{err:?}"
    );
    let err = boot.get(0, "a").unwrap_err();
    assert!(err.to_string().contains("chunk 1 is missing"), "{err}");
    assert!(
        matches!(
            err,
            GetError::Corrupt {
                reason: CorruptValue::MissingChunk(1),
                ..
            }
        ),
        "{err:?}"
    );
    let chain = std::error::Error::source(&err);
    assert!(chain.is_some_and(|e| e.is::<CorruptValue>()), "{err:?}");
    let err = boot.get(0, "a").unwrap_err();
    assert!(matches!(err, GetError::NotFound { rank: 0, .. }), "{err:?}");
    let err = boot.fence().unwrap_err();
    assert!(err.to_string().contains("rc is not an integer"), "{err}");
    drop(boot);
    handle.join().unwrap();
}

#[test]
fn keys_and_values_over_the_limits_are_refused() {
    let mut boot = Bootstrap::singleton().unwrap();
    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    let err = boot.put(&long_key, b"v").unwrap_err();
    assert!(
        matches!(err, PutError::Key(KeyError::TooLong { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("limit is 32"), "{err}");
    let err = boot.put("a=b", b"v").unwrap_err();
    assert!(
        matches!(err, PutError::Key(KeyError::BadChar('='))),
        "{err:?}"
    );
    let err = boot.put("", b"v").unwrap_err();
    assert!(matches!(err, PutError::Key(KeyError::Empty)), "{err:?}");
    let big = vec![0u8; MAX_VALUE_LEN + 1];
    let err = boot.put("big", &big).unwrap_err();
    assert!(matches!(err, PutError::ValueTooLong { .. }), "{err:?}");
    let err = boot.get(0, &long_key).unwrap_err();
    assert!(matches!(err, GetError::Key(_)), "{err:?}");
    // The limit itself is fine.
    let max = vec![7u8; MAX_VALUE_LEN];
    boot.put(&"k".repeat(MAX_KEY_LEN), &max).unwrap();
    assert_eq!(boot.get(0, &"k".repeat(MAX_KEY_LEN)).unwrap(), max);
}

#[test]
fn singleton_serves_put_and_get_locally() {
    let mut boot = Bootstrap::singleton().unwrap();
    assert_eq!((boot.rank(), boot.size()), (0, 1));
    assert_eq!((boot.local_rank(), boot.local_size()), (0, 1));
    assert_eq!(boot.launcher(), &Launcher::Singleton);
    boot.put("addr", b"here").unwrap();
    boot.fence().unwrap();
    boot.barrier().unwrap();
    assert_eq!(boot.get(0, "addr").unwrap(), b"here");
    assert!(matches!(
        boot.get(0, "other"),
        Err(GetError::NotFound { .. })
    ));
    assert!(matches!(
        boot.get(1, "addr"),
        Err(GetError::NoSuchRank { rank: 1, size: 1 })
    ));
    boot.finalize().unwrap();
}

#[test]
fn job_key_compares_and_never_prints() {
    let a = JobKey::generate().unwrap();
    let b = JobKey::generate().unwrap();
    assert_ne!(a, b);
    assert!(a.matches(a.as_bytes()));
    assert!(!a.matches(b.as_bytes()));
    assert!(!a.matches(&a.as_bytes()[..31]));
    assert_eq!(format!("{a:?}"), "JobKey(..)");
}

/// Serves `size` ranks with the launcher's server, one thread per rank
/// connection (blocking I/O), like `fireopal run` does with `poll`.
fn threaded_server(size: u32) -> Vec<UnixStream> {
    let server = Arc::new(Mutex::new(PmiServer::new(size, "kvs_threads".into())));
    let mut clients = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..size {
        let (c, s) = UnixStream::pair().unwrap();
        clients.push(c);
        ours.push(s);
    }
    let writers: Arc<Vec<UnixStream>> =
        Arc::new(ours.iter().map(|s| s.try_clone().unwrap()).collect());
    for (rank, mut stream) in ours.into_iter().enumerate() {
        let server = Arc::clone(&server);
        let writers = Arc::clone(&writers);
        thread::spawn(move || {
            let rank = rank as u32;
            let mut buf = [0u8; 4096];
            loop {
                let n = match std::io::Read::read(&mut stream, &mut buf) {
                    Ok(0) | Err(_) => {
                        let mut s = server.lock().unwrap();
                        s.disconnected(rank);
                        s.exited(rank);
                        return;
                    }
                    Ok(n) => n,
                };
                let mut s = server.lock().unwrap();
                let notices = s.input(rank, &buf[..n]);
                // A broken barrier is answered in-band; nothing else may occur.
                assert!(
                    notices
                        .iter()
                        .all(|n| matches!(n, super::server::Notice::BarrierBroken { .. })),
                    "{notices:?}"
                );
                for (r, mut w) in writers.iter().enumerate() {
                    let out = s.output(r as u32).unwrap();
                    let _ = w.write_all(out);
                    out.clear();
                }
            }
        });
    }
    clients
}

#[test]
fn ranks_exchange_values_through_the_launcher_server() {
    let size = 4u32;
    let clients = threaded_server(size);
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(rank, stream)| {
            thread::spawn(move || {
                let rank = rank as u32;
                let mut boot = Bootstrap::over_pmi(stream, rank, size).unwrap();
                // Long enough to need several chunks at vallen_max=1024.
                let value: Vec<u8> = (0..1500 + rank as usize)
                    .map(|i| (i as u32 * 31 + rank) as u8)
                    .collect();
                boot.put("addr", &value).unwrap();
                boot.put("key", boot.job_key().clone().as_bytes()).unwrap();
                // Not visible before the fence (Hydra's semantics too).
                assert!(matches!(
                    boot.get(rank, "addr"),
                    Err(GetError::NotFound { .. })
                ));
                boot.fence().unwrap();
                for peer in 0..size {
                    let expect: Vec<u8> = (0..1500 + peer as usize)
                        .map(|i| (i as u32 * 31 + peer) as u8)
                        .collect();
                    assert_eq!(boot.get(peer, "addr").unwrap(), expect);
                    let theirs = boot.get(peer, "key").unwrap();
                    assert!(boot.job_key().matches(&theirs));
                }
                // Threads share one node.
                assert_eq!(boot.local_size(), size);
                assert_eq!(boot.local_rank(), rank);
                assert_eq!(boot.local_ranks(), &[0, 1, 2, 3]);
                boot.barrier().unwrap();
                boot.finalize().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn fence_fails_when_a_rank_finalizes_instead() {
    let clients = threaded_server(2);
    let mut it = clients.into_iter();
    let (c0, c1) = (it.next().unwrap(), it.next().unwrap());
    let t1 = thread::spawn(move || {
        let boot = Bootstrap::over_pmi(c1, 1, 2).unwrap();
        boot.finalize().unwrap();
    });
    let mut boot = Bootstrap::over_pmi(c0, 0, 2).unwrap();
    t1.join().unwrap();
    let err = boot.fence().unwrap_err();
    assert!(
        matches!(&err, WireError::Rejected { during: "barrier_in", msg, .. } if msg == "rank_1_left_the_job"),
        "{err:?}"
    );
    boot.finalize().unwrap();
}
