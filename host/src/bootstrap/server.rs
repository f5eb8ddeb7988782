//! The PMI-1 server inside `fireopal run`: a state machine fed with the
//! bytes each rank sends, producing the bytes to send back and notices for
//! the supervisor. It does no I/O itself, so it is tested without processes.
//!
//! Semantics follow Hydra: puts are staged per rank and become visible to
//! `get` when the barrier they precede completes; the limits announced by
//! `get_maxes` are enforced on every put.

use std::collections::HashMap;

use super::wire::{self, Message};

/// Longest key the server accepts, counting a C string's NUL (as Hydra).
pub(crate) const KEYLEN_MAX: usize = 64;
/// Longest value the server accepts, counting a C string's NUL (as Hydra).
pub(crate) const VALLEN_MAX: usize = 1024;
/// Longest key-value space name, counting a C string's NUL.
const KVSNAME_MAX: usize = 256;

/// Something the supervisor must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The rank sent `cmd=abort`.
    Abort { rank: u32, code: i32 },
    /// The rank sent something that is not PMI-1; its connection is dead
    /// (the supervisor should close it).
    Protocol { rank: u32, reason: String },
    /// A barrier cannot complete because `left` finalized or exited; the
    /// waiting ranks were answered with an error.
    BarrierBroken { left: u32, waiting: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    InBarrier,
    /// Sent `finalize`.
    Finalized,
    /// Closed its connection; still counts for barriers until it exits.
    Disconnected,
    /// The process is gone.
    Exited,
}

#[derive(Debug)]
struct Peer {
    input: Vec<u8>,
    output: Vec<u8>,
    state: State,
    staged: Vec<(String, String)>,
}

/// The key-value store and barrier of one job.
#[derive(Debug)]
pub(crate) struct PmiServer {
    kvsname: String,
    peers: Vec<Peer>,
    kvs: HashMap<String, String>,
}

impl PmiServer {
    /// A server for `size` ranks, all on this node.
    pub(crate) fn new(size: u32, kvsname: String) -> PmiServer {
        let mut kvs = HashMap::new();
        // Hydra's format for "size ranks, consecutive, on one node"; MPICH
        // reads it to find its node-local peers.
        kvs.insert(
            "PMI_process_mapping".to_owned(),
            format!("(vector,(0,1,{size}))"),
        );
        let peers = (0..size)
            .map(|_| Peer {
                input: Vec::new(),
                output: Vec::new(),
                state: State::Active,
                staged: Vec::new(),
            })
            .collect();
        PmiServer {
            kvsname,
            peers,
            kvs,
        }
    }

    /// Bytes waiting to be sent to `rank`; the caller drains what it wrote.
    pub(crate) fn output(&mut self, rank: u32) -> Option<&mut Vec<u8>> {
        self.peer_mut(rank).map(|p| &mut p.output)
    }

    /// Whether anything waits to be sent to `rank`.
    pub(crate) fn has_output(&self, rank: u32) -> bool {
        self.peer(rank).is_some_and(|p| !p.output.is_empty())
    }

    fn peer(&self, rank: u32) -> Option<&Peer> {
        self.peers.get(usize::try_from(rank).ok()?)
    }

    fn peer_mut(&mut self, rank: u32) -> Option<&mut Peer> {
        self.peers.get_mut(usize::try_from(rank).ok()?)
    }

    fn reply(&mut self, rank: u32, msg: &Message) {
        if let Some(p) = self.peer_mut(rank) {
            p.output.extend_from_slice(msg.to_line().as_bytes());
        }
    }

    /// Feeds bytes received from `rank`; returns the notices they caused.
    pub(crate) fn input(&mut self, rank: u32, bytes: &[u8]) -> Vec<Notice> {
        let mut notices = Vec::new();
        let lines = match self.peer_mut(rank) {
            Some(p) if matches!(p.state, State::Active | State::InBarrier | State::Finalized) => {
                p.input.extend_from_slice(bytes);
                wire::take_lines(&mut p.input)
            }
            _ => return notices,
        };
        let lines = match lines {
            Ok(lines) => lines,
            Err(len) => {
                self.protocol_error(rank, format!("line of over {len} bytes"), &mut notices);
                return notices;
            }
        };
        for line in lines {
            match Message::parse(&line) {
                Ok(msg) => self.command(rank, &msg, &mut notices),
                Err(e) => self.protocol_error(rank, e.to_string(), &mut notices),
            }
            if self.peer(rank).map(|p| p.state) == Some(State::Disconnected) {
                break;
            }
        }
        notices
    }

    fn protocol_error(&mut self, rank: u32, reason: String, notices: &mut Vec<Notice>) {
        if let Some(p) = self.peer_mut(rank) {
            p.state = State::Disconnected;
            p.output.clear();
        }
        notices.push(Notice::Protocol { rank, reason });
    }

    /// The connection to `rank` reached end of file.
    pub(crate) fn disconnected(&mut self, rank: u32) {
        if let Some(p) = self.peer_mut(rank) {
            if p.state != State::Exited {
                p.state = match p.state {
                    State::Finalized => State::Finalized,
                    _ => State::Disconnected,
                };
            }
            p.output.clear();
        }
    }

    /// The process of `rank` is gone: barriers cannot wait for it any more.
    pub(crate) fn exited(&mut self, rank: u32) -> Vec<Notice> {
        let mut notices = Vec::new();
        if let Some(p) = self.peer_mut(rank) {
            p.state = State::Exited;
            p.output.clear();
        }
        self.check_barrier(&mut notices);
        notices
    }

    fn command(&mut self, rank: u32, msg: &Message, notices: &mut Vec<Notice>) {
        let state = self.peer(rank).map(|p| p.state);
        if state == Some(State::Finalized) {
            self.protocol_error(rank, format!("cmd={} after finalize", msg.cmd), notices);
            return;
        }
        if state == Some(State::InBarrier) && msg.cmd != "abort" {
            self.protocol_error(rank, format!("cmd={} inside a barrier", msg.cmd), notices);
            return;
        }
        match msg.cmd.as_str() {
            "init" => {
                let rc = if msg.field("pmi_version") == Some("1") {
                    "0"
                } else {
                    "-1"
                };
                self.reply(
                    rank,
                    &Message::new(
                        "response_to_init",
                        &[("pmi_version", "1"), ("pmi_subversion", "1"), ("rc", rc)],
                    ),
                );
            }
            "get_maxes" => self.reply(
                rank,
                &Message::new(
                    "maxes",
                    &[
                        ("kvsname_max", &KVSNAME_MAX.to_string()),
                        ("keylen_max", &KEYLEN_MAX.to_string()),
                        ("vallen_max", &VALLEN_MAX.to_string()),
                    ],
                ),
            ),
            "get_appnum" => self.reply(rank, &Message::new("appnum", &[("appnum", "0")])),
            "get_universe_size" => {
                let size = self.peers.len().to_string();
                self.reply(rank, &Message::new("universe_size", &[("size", &size)]));
            }
            "get_my_kvsname" => {
                let name = self.kvsname.clone();
                self.reply(rank, &Message::new("my_kvsname", &[("kvsname", &name)]));
            }
            "put" => {
                let result = self.put(rank, msg);
                let reply = match result {
                    Ok(()) => Message::new("put_result", &[("rc", "0"), ("msg", "success")]),
                    Err(why) => Message::new("put_result", &[("rc", "-1"), ("msg", why)]),
                };
                self.reply(rank, &reply);
            }
            "get" => {
                let found = match (msg.field("kvsname"), msg.field("key")) {
                    (Some(k), Some(key)) if k == self.kvsname => self.kvs.get(key).cloned(),
                    _ => None,
                };
                let reply = match found {
                    Some(value) => Message::new(
                        "get_result",
                        &[("rc", "0"), ("msg", "success"), ("value", &value)],
                    ),
                    None => Message::new("get_result", &[("rc", "-1"), ("msg", "key_not_found")]),
                };
                self.reply(rank, &reply);
            }
            "barrier_in" => {
                if let Some(p) = self.peer_mut(rank) {
                    p.state = State::InBarrier;
                }
                self.check_barrier(notices);
            }
            "finalize" => {
                self.reply(rank, &Message::new("finalize_ack", &[]));
                if let Some(p) = self.peer_mut(rank) {
                    p.state = State::Finalized;
                }
                self.check_barrier(notices);
            }
            "abort" => {
                let code = msg
                    .field("exitcode")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                notices.push(Notice::Abort { rank, code });
            }
            other => {
                self.protocol_error(rank, format!("unsupported command cmd={other}"), notices);
            }
        }
    }

    fn put(&mut self, rank: u32, msg: &Message) -> Result<(), &'static str> {
        let (Some(kvsname), Some(key), Some(value)) =
            (msg.field("kvsname"), msg.field("key"), msg.field("value"))
        else {
            return Err("missing_kvsname_key_or_value");
        };
        if kvsname != self.kvsname {
            return Err("unknown_kvsname");
        }
        if key.is_empty() || key.len() >= KEYLEN_MAX {
            return Err("key_too_long");
        }
        if value.len() >= VALLEN_MAX {
            return Err("value_too_long");
        }
        if let Some(p) = self.peer_mut(rank) {
            p.staged.push((key.to_owned(), value.to_owned()));
        }
        Ok(())
    }

    /// Completes the barrier when every rank is in it, or breaks it when a
    /// rank that is not in it can never enter.
    fn check_barrier(&mut self, notices: &mut Vec<Notice>) {
        let waiting = self
            .peers
            .iter()
            .filter(|p| p.state == State::InBarrier)
            .count();
        if waiting == 0 {
            return;
        }
        if waiting == self.peers.len() {
            for p in &mut self.peers {
                for (k, v) in p.staged.drain(..) {
                    self.kvs.insert(k, v);
                }
            }
            let out = Message::new("barrier_out", &[]);
            for rank in 0..self.peers.len() {
                let rank = u32::try_from(rank).unwrap_or(u32::MAX);
                if let Some(p) = self.peer_mut(rank) {
                    p.state = State::Active;
                }
                self.reply(rank, &out);
            }
            return;
        }
        let left = self
            .peers
            .iter()
            .position(|p| matches!(p.state, State::Finalized | State::Exited));
        let Some(left) = left else { return };
        let left = u32::try_from(left).unwrap_or(u32::MAX);
        let why = format!("rank_{left}_left_the_job");
        let out = Message::new("barrier_out", &[("rc", "-1"), ("msg", &why)]);
        for rank in 0..self.peers.len() {
            let rank = u32::try_from(rank).unwrap_or(u32::MAX);
            let in_barrier = self.peer(rank).map(|p| p.state) == Some(State::InBarrier);
            if in_barrier {
                if let Some(p) = self.peer_mut(rank) {
                    p.state = State::Active;
                }
                self.reply(rank, &out);
            }
        }
        notices.push(Notice::BarrierBroken { left, waiting });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(server: &mut PmiServer, rank: u32) -> String {
        let out = server.output(rank).unwrap();
        String::from_utf8(std::mem::take(out)).unwrap()
    }

    #[test]
    fn handshake_and_limits() {
        let mut s = PmiServer::new(2, "kvs_t".into());
        let n = s.input(
            0,
            b"cmd=init pmi_version=1 pmi_subversion=1\ncmd=get_maxes\n",
        );
        assert!(n.is_empty());
        assert_eq!(
            take(&mut s, 0),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n\
             cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
        );
        s.input(
            1,
            b"cmd=get_my_kvsname\ncmd=get_appnum\ncmd=get_universe_size\n",
        );
        assert_eq!(
            take(&mut s, 1),
            "cmd=my_kvsname kvsname=kvs_t\ncmd=appnum appnum=0\ncmd=universe_size size=2\n"
        );
        let long = format!(
            "cmd=put kvsname=kvs_t key=k value={}\n",
            "a".repeat(VALLEN_MAX)
        );
        s.input(0, long.as_bytes());
        assert_eq!(take(&mut s, 0), "cmd=put_result rc=-1 msg=value_too_long\n");
        let long = format!(
            "cmd=put kvsname=kvs_t key={} value=1\n",
            "k".repeat(KEYLEN_MAX)
        );
        s.input(0, long.as_bytes());
        assert_eq!(take(&mut s, 0), "cmd=put_result rc=-1 msg=key_too_long\n");
        s.input(0, b"cmd=put kvsname=other key=k value=1\n");
        assert_eq!(
            take(&mut s, 0),
            "cmd=put_result rc=-1 msg=unknown_kvsname\n"
        );
    }

    #[test]
    fn puts_become_visible_at_the_barrier() {
        let mut s = PmiServer::new(2, "kvs_t".into());
        s.input(
            0,
            b"cmd=put kvsname=kvs_t key=a value=1\ncmd=get kvsname=kvs_t key=a\n",
        );
        assert_eq!(
            take(&mut s, 0),
            "cmd=put_result rc=0 msg=success\ncmd=get_result rc=-1 msg=key_not_found\n"
        );
        s.input(0, b"cmd=barrier_in\n");
        assert_eq!(take(&mut s, 0), "");
        // Split across reads.
        s.input(1, b"cmd=barr");
        s.input(1, b"ier_in\n");
        assert_eq!(take(&mut s, 0), "cmd=barrier_out\n");
        assert_eq!(take(&mut s, 1), "cmd=barrier_out\n");
        s.input(
            1,
            b"cmd=get kvsname=kvs_t key=a\ncmd=get kvsname=kvs_t key=PMI_process_mapping\n",
        );
        assert_eq!(
            take(&mut s, 1),
            "cmd=get_result rc=0 msg=success value=1\n\
             cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"
        );
    }

    #[test]
    fn barrier_breaks_when_a_rank_leaves() {
        let mut s = PmiServer::new(3, "kvs_t".into());
        s.input(0, b"cmd=barrier_in\n");
        s.disconnected(2);
        // A closed connection alone keeps the barrier waiting for the exit.
        assert!(s.exited(1).len() == 1);
        assert_eq!(
            take(&mut s, 0),
            "cmd=barrier_out rc=-1 msg=rank_1_left_the_job\n"
        );
        // Entering a barrier when a rank already left fails at once.
        let n = s.input(0, b"cmd=barrier_in\n");
        assert_eq!(
            n,
            vec![Notice::BarrierBroken {
                left: 1,
                waiting: 1
            }]
        );
        assert!(take(&mut s, 0).starts_with("cmd=barrier_out rc=-1"));

        let mut s = PmiServer::new(2, "kvs_t".into());
        s.input(0, b"cmd=finalize\n");
        assert_eq!(take(&mut s, 0), "cmd=finalize_ack\n");
        let n = s.input(1, b"cmd=barrier_in\n");
        assert_eq!(
            n,
            vec![Notice::BarrierBroken {
                left: 0,
                waiting: 1
            }]
        );
    }

    #[test]
    fn bad_input_is_a_notice_not_a_panic() {
        let mut s = PmiServer::new(2, "kvs_t".into());
        let n = s.input(0, b"hello\ncmd=get_maxes\n");
        assert!(matches!(n.as_slice(), [Notice::Protocol { rank: 0, .. }]));
        assert_eq!(take(&mut s, 0), "");
        // Input after the connection is dead is ignored.
        assert!(s.input(0, b"cmd=get_maxes\n").is_empty());
        let n = s.input(1, b"cmd=spawn\n");
        assert!(matches!(n.as_slice(), [Notice::Protocol { rank: 1, .. }]));
        let mut s = PmiServer::new(1, "kvs_t".into());
        let n = s.input(0, &vec![b'x'; wire::MAX_LINE + 1]);
        assert!(matches!(n.as_slice(), [Notice::Protocol { rank: 0, .. }]));
        let mut s = PmiServer::new(1, "kvs_t".into());
        let n = s.input(0, b"cmd=abort exitcode=7\n");
        assert_eq!(n, vec![Notice::Abort { rank: 0, code: 7 }]);
        assert!(s.input(9, b"cmd=init\n").is_empty());
    }
}
