//! Opening connections: accepting, dialling, and the handshake in which
//! both ends prove they hold the job key (see
//! [`fireopal_core::wire::tcp::handshake`] for the messages).
//!
//! A connection that fails the handshake on the accepting side (not a
//! fireopal peer, wrong version, wrong rank or link, bad proof, too slow)
//! is dropped and logged, and no peer is touched. On the dialling side,
//! the peer we meant to reach failed to authenticate or refused us: the
//! peer fails.
//!
//! Simultaneous connects: when an authenticated connection arrives from a
//! peer we are dialling ourselves, the connection opened by the lower rank
//! wins on both sides. The acceptor decides: it keeps the incoming one if
//! the peer's rank is lower (closing its own attempt), and otherwise
//! answers `Duplicate`, upon which the dialler drops its attempt and waits
//! for ours. Frames flow only after the Verdict, so nothing is ever sent
//! on the losing connection, and queued messages stay with the peer.

use std::io;
use std::time::Instant;

use fireopal_abi::btl::Rank;
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::handshake::{
    Challenge, HandshakeError, Hello, Proof, Role, Transcript, Verdict, NONCE_LEN,
};

use crate::conn::{Conn, ConnId, Phase, Rx};
use crate::module::{io_error, PeerState, TcpModule};
use crate::sys::{random_bytes, Recv};

/// Most connections accepted per `progress` call.
const ACCEPTS_PER_PROGRESS: usize = 64;

/// The handshake message a connection waits for, with what its phase
/// remembers.
enum Expect {
    Hello,
    Challenge(Hello),
    Proof(Transcript),
    Verdict,
}

impl Expect {
    fn len(&self) -> usize {
        match self {
            Self::Hello => Hello::LEN,
            Self::Challenge(_) => Challenge::LEN,
            Self::Proof(_) => Proof::LEN,
            Self::Verdict => Verdict::LEN,
        }
    }
}

/// What the handshake step decided.
enum Step {
    /// Wait for more bytes.
    Wait,
    /// Message handled; read the next one.
    Continue,
    /// The connection now carries frames.
    Established,
    /// The connection was closed.
    Closed,
}

impl TcpModule {
    /// Accepts pending connections; they must authenticate before their
    /// deadline.
    pub(crate) fn accept_all(&mut self) {
        for _ in 0..ACCEPTS_PER_PROGRESS {
            let (sock, remote) = match self.listener.accept() {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => {
                    self.log(LogLevel::Warn, &format!("accept failed: {e}"));
                    return;
                }
            };
            let from = remote.map_or_else(|| "unknown address".to_owned(), |a| a.to_string());
            let now = Instant::now();
            self.make_room(remote.map(|a| a.ip()), now);
            // Best effort: latency only.
            let _ = sock.set_nodelay();
            if let Some(addr) = remote {
                self.choose_congestion(&sock, addr, format_args!("from {from}"));
            }
            if let Err(e) =
                sock.set_liveness(self.settings.keepalive, self.settings.user_timeout_ms)
            {
                self.log(
                    LogLevel::Warn,
                    &format!(
                        "cannot set the dead-peer timeouts of the connection from {from}: {e}"
                    ),
                );
            }
            let deadline = now + self.settings.handshake_timeout;
            let mut conn = Conn::new(sock, Phase::AwaitHello, None, deadline);
            conn.remote = remote;
            let id = self.conns.insert(conn);
            let watched = self
                .conns
                .get(id)
                .map(|c| self.epoll.add(&c.sock, id.token(), false));
            if let Some(Err(e)) = watched {
                self.log(
                    LogLevel::Warn,
                    &format!("cannot watch connection from {from}: {e}"),
                );
                self.close_conn(id);
            }
        }
    }

    /// Our connect finished (or failed): send the Hello.
    pub(crate) fn connect_done(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get(id) else {
            return;
        };
        let Some(rank) = conn.peer else {
            self.close_conn(id);
            return;
        };
        let failure = match conn.sock.take_error() {
            Ok(None) => match conn.sock.peer_addr() {
                Ok(_) => None,
                // Not connected yet (a spurious wake-up): wait.
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return,
                Err(e) => Some(e),
            },
            Ok(Some(e)) | Err(e) => Some(e),
        };
        if let Some(e) = failure {
            let who = conn.describe();
            if self.redial_later(rank, id, &format!("cannot connect: {e}")) {
                return;
            }
            self.fail_peer(
                rank,
                PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("cannot connect to {who}: {e}"),
                ),
            );
            return;
        }
        let Some(target) = self.peers.get(&rank).and_then(|p| p.target) else {
            self.close_conn(id);
            return;
        };
        let mut nonce = [0u8; NONCE_LEN];
        if let Err(e) = random_bytes(&mut nonce) {
            self.fail_peer(rank, io_error("no random bytes for a nonce", &e));
            return;
        }
        let hello = Hello {
            link: self.link(),
            from_rank: self.me,
            to_rank: rank,
            from_entry: self.entry as u8,
            to_entry: target.entry,
            nonce,
        };
        if !self.write_handshake(id, &hello.encode()) {
            return;
        }
        if let Some(conn) = self.conns.get_mut(id) {
            conn.nonce = nonce;
            conn.phase = Phase::AwaitChallenge { hello };
        }
        self.watch_writes(id, false);
    }

    /// Writes one whole handshake message. A fresh connection's send buffer
    /// is empty, so a short write means the connection is broken: it is
    /// dropped (failing the peer when we dialled). False if dropped.
    fn write_handshake(&mut self, id: ConnId, bytes: &[u8]) -> bool {
        let Some(conn) = self.conns.get(id) else {
            return false;
        };
        let error = match conn.sock.send(bytes) {
            Ok(n) if n == bytes.len() => return true,
            Ok(n) => format!("took only {n} of {} handshake bytes", bytes.len()),
            Err(e) => e.to_string(),
        };
        self.cut(id, &format!("handshake write failed: {error}"));
        false
    }

    /// Ends a connection whose handshake was cut by the network or the
    /// other end (closed, reset): one we dialled is dialled again while
    /// attempts remain; otherwise as [`Self::reject`].
    fn cut(&mut self, id: ConnId, reason: &str) {
        let Some(conn) = self.conns.get(id) else {
            return;
        };
        if !conn.phase.accepted() {
            if let Some(rank) = conn.peer {
                let ours = self
                    .peers
                    .get(&rank)
                    .is_some_and(|p| matches!(p.state, PeerState::Connecting(c) if c == id));
                if ours && self.redial_later(rank, id, reason) {
                    return;
                }
            }
        }
        self.reject(id, ErrorKind::CONNECTION_CLOSED, reason);
    }

    /// Ends a connection that failed its handshake: an accepted one is
    /// dropped and logged; one we dialled fails the peer we meant.
    fn reject(&mut self, id: ConnId, kind: ErrorKind, reason: &str) {
        let Some(conn) = self.conns.get(id) else {
            return;
        };
        let who = conn.describe();
        if conn.phase.accepted() {
            let addr = conn.remote.map(|a| a.ip());
            self.close_conn(id);
            self.report_stranger(addr, Instant::now(), reason);
            return;
        }
        let Some(rank) = conn.peer else {
            self.close_conn(id);
            return;
        };
        let ours = self
            .peers
            .get(&rank)
            .is_some_and(|p| matches!(p.state, PeerState::Connecting(c) if c == id));
        if ours {
            self.log(
                LogLevel::Warn,
                &format!("connection to {who} failed: {reason}"),
            );
            self.fail_peer(
                rank,
                PluginError::new(kind, format!("connection to {who} failed: {reason}")),
            );
        } else {
            self.close_conn(id);
        }
    }

    /// Reads handshake messages; true if the connection ends up
    /// established (frames may follow at once).
    pub(crate) fn read_handshake(&mut self, id: ConnId) -> bool {
        loop {
            match self.handshake_step(id) {
                Step::Wait | Step::Closed => return false,
                Step::Continue => {}
                Step::Established => return true,
            }
        }
    }

    fn handshake_step(&mut self, id: ConnId) -> Step {
        let Some(conn) = self.conns.get_mut(id) else {
            return Step::Closed;
        };
        let expect = match &conn.phase {
            Phase::AwaitHello => Expect::Hello,
            Phase::AwaitChallenge { hello } => Expect::Challenge(*hello),
            Phase::AwaitProof { transcript } => Expect::Proof(*transcript),
            Phase::AwaitVerdict => Expect::Verdict,
            Phase::Connecting => return Step::Wait,
            Phase::Established => return Step::Established,
        };
        let want = expect.len();
        // Exactly the expected message: frames after it stay in the socket.
        let got = match conn.hs_buf.get_mut(conn.hs_have..want) {
            Some(buf) => conn.sock.recv(buf),
            None => Ok(Recv::Data(0)),
        };
        match got {
            Ok(Recv::Data(n)) => conn.hs_have += n,
            Ok(Recv::WouldBlock) => return Step::Wait,
            Ok(Recv::Closed) => {
                self.handshake_closed(id);
                return Step::Closed;
            }
            // A close with our bytes unread resets the connection (the
            // losing end of a simultaneous connect does this): a close.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                self.handshake_closed(id);
                return Step::Closed;
            }
            Err(e) => {
                self.cut(id, &format!("read failed: {e}"));
                return Step::Closed;
            }
        }
        if conn.hs_have < want {
            // A stranger is told apart by its first bytes: it does not
            // wait for the deadline.
            if matches!(expect, Expect::Hello) {
                if let Err(e) = Hello::parse(&conn.hs_buf[..conn.hs_have]) {
                    if !matches!(e, HandshakeError::BadLength { .. }) {
                        self.reject(id, ErrorKind::MALFORMED, &e.to_string());
                        return Step::Closed;
                    }
                }
            }
            return Step::Wait;
        }
        conn.hs_have = 0;
        let mut msg = [0u8; 80];
        msg[..want].copy_from_slice(&conn.hs_buf[..want]);
        let msg = &msg[..want];
        match expect {
            Expect::Hello => self.on_hello(id, msg),
            Expect::Challenge(hello) => self.on_challenge(id, hello, msg),
            Expect::Proof(transcript) => self.on_proof(id, transcript, msg),
            Expect::Verdict => self.on_verdict(id, msg),
        }
    }

    /// The other end closed during the handshake.
    fn handshake_closed(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get(id) else {
            return;
        };
        if conn.phase.accepted() {
            // Also the normal end of a connection that lost a
            // simultaneous-connect race on the other side.
            let who = conn.describe();
            self.log(
                LogLevel::Debug,
                &format!("connection from {who} closed during the handshake"),
            );
            self.close_conn(id);
        } else {
            self.cut(id, "closed by the peer during the handshake");
        }
    }

    /// Acceptor: a Hello arrived.
    fn on_hello(&mut self, id: ConnId, msg: &[u8]) -> Step {
        let hello = match Hello::parse(msg) {
            Ok(h) => h,
            Err(e) => {
                self.reject(id, ErrorKind::MALFORMED, &e.to_string());
                return Step::Closed;
            }
        };
        let problem = if hello.to_rank != self.me {
            Some(format!(
                "it wants rank {}, this is rank {}",
                hello.to_rank, self.me
            ))
        } else if hello.from_rank >= self.size || hello.from_rank == self.me {
            Some(format!(
                "it claims rank {}, not a peer in a job of {}",
                hello.from_rank, self.size
            ))
        } else if hello.link != self.link() || usize::from(hello.to_entry) != self.entry {
            Some(format!(
                "it wants entry {} link {}, this module is entry {} link {}",
                hello.to_entry,
                hello.link,
                self.entry,
                self.link()
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            self.reject(id, ErrorKind::PEER_FAILED, &p);
            return Step::Closed;
        }
        let mut nonce = [0u8; NONCE_LEN];
        if let Err(e) = random_bytes(&mut nonce) {
            self.reject(
                id,
                ErrorKind::IO,
                &format!("no random bytes for a nonce: {e}"),
            );
            return Step::Closed;
        }
        let transcript = Transcript::new(&hello, nonce);
        let challenge = Challenge {
            from_rank: self.me,
            to_rank: hello.from_rank,
            nonce,
            mac: transcript.mac(&self.key, Role::Acceptor),
        };
        if let Some(conn) = self.conns.get_mut(id) {
            // Claimed, not proved yet.
            conn.peer = Some(hello.from_rank);
            conn.nonce = nonce;
        }
        if !self.write_handshake(id, &challenge.encode()) {
            return Step::Closed;
        }
        if let Some(conn) = self.conns.get_mut(id) {
            conn.phase = Phase::AwaitProof { transcript };
        }
        Step::Continue
    }

    /// Connector: the acceptor's Challenge arrived.
    fn on_challenge(&mut self, id: ConnId, hello: Hello, msg: &[u8]) -> Step {
        let challenge = match Challenge::parse(msg) {
            Ok(c) => c,
            Err(e) => {
                self.reject(id, ErrorKind::MALFORMED, &e.to_string());
                return Step::Closed;
            }
        };
        if challenge.from_rank != hello.to_rank || challenge.to_rank != self.me {
            self.reject(
                id,
                ErrorKind::AUTHENTICATION,
                &format!(
                    "answered as rank {} to rank {}",
                    challenge.from_rank, challenge.to_rank
                ),
            );
            return Step::Closed;
        }
        let transcript = Transcript::new(&hello, challenge.nonce);
        if !transcript.verify(&self.key, Role::Acceptor, &challenge.mac) {
            self.reject(
                id,
                ErrorKind::AUTHENTICATION,
                "it did not prove it holds the job key",
            );
            return Step::Closed;
        }
        let proof = Proof {
            mac: transcript.mac(&self.key, Role::Connector),
        };
        if !self.write_handshake(id, &proof.encode()) {
            return Step::Closed;
        }
        if let Some(conn) = self.conns.get_mut(id) {
            conn.phase = Phase::AwaitVerdict;
        }
        Step::Continue
    }

    /// Acceptor: the connector's Proof arrived; decide.
    fn on_proof(&mut self, id: ConnId, transcript: Transcript, msg: &[u8]) -> Step {
        let proof = match Proof::parse(msg) {
            Ok(p) => p,
            Err(e) => {
                self.reject(id, ErrorKind::MALFORMED, &e.to_string());
                return Step::Closed;
            }
        };
        if !transcript.verify(&self.key, Role::Connector, &proof.mac) {
            self.reject(
                id,
                ErrorKind::AUTHENTICATION,
                "it did not prove it holds the job key",
            );
            return Step::Closed;
        }
        let rank = transcript.connector_rank;
        let peer = self
            .peers
            .entry(rank)
            .or_insert_with(|| crate::module::Peer::new(None));
        let verdict = match &peer.state {
            PeerState::Idle | PeerState::AwaitingIncoming(_) | PeerState::Redial(_) => {
                Verdict::Accept
            }
            PeerState::Connecting(ours) if rank < self.me => {
                // The lower rank's connection wins: drop our attempt.
                let ours = *ours;
                self.close_conn(ours);
                self.log(
                    LogLevel::Debug,
                    &format!("took rank {rank}'s connection, dropped our own attempt"),
                );
                Verdict::Accept
            }
            PeerState::Connecting(_) | PeerState::Established(_) => Verdict::Duplicate,
            PeerState::Failed(_) => {
                self.reject(
                    id,
                    ErrorKind::PEER_FAILED,
                    "the rank already failed in this job",
                );
                return Step::Closed;
            }
        };
        if !self.write_handshake(id, &verdict.encode()) {
            return Step::Closed;
        }
        match verdict {
            Verdict::Accept => {
                self.establish(id, rank);
                Step::Established
            }
            Verdict::Duplicate => {
                self.log(
                    LogLevel::Debug,
                    &format!("kept our own connection to rank {rank}, refused its duplicate"),
                );
                self.close_conn(id);
                Step::Closed
            }
        }
    }

    /// Connector: the Verdict arrived.
    fn on_verdict(&mut self, id: ConnId, msg: &[u8]) -> Step {
        let verdict = match Verdict::parse(msg) {
            Ok(v) => v,
            Err(e) => {
                self.reject(id, ErrorKind::MALFORMED, &e.to_string());
                return Step::Closed;
            }
        };
        let Some(rank) = self.conns.get(id).and_then(|c| c.peer) else {
            return Step::Closed;
        };
        let ours = self
            .peers
            .get(&rank)
            .is_some_and(|p| matches!(p.state, PeerState::Connecting(c) if c == id));
        match verdict {
            Verdict::Accept if ours => {
                self.establish(id, rank);
                Step::Established
            }
            Verdict::Accept => {
                // We already switched to the peer's connection.
                self.close_conn(id);
                Step::Closed
            }
            Verdict::Duplicate => {
                self.close_conn(id);
                if ours {
                    if let Some(p) = self.peers.get_mut(&rank) {
                        p.state = PeerState::AwaitingIncoming(Instant::now());
                    }
                }
                Step::Closed
            }
        }
    }

    /// The connection carries frames from now on; queued bytes go out.
    fn establish(&mut self, id: ConnId, rank: Rank) {
        let staging = self.settings.recv_staging;
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        conn.phase = Phase::Established;
        conn.peer = Some(rank);
        conn.deadline = None;
        conn.rx = Some(Box::new(Rx::new(staging)));
        let local = conn.sock.local_addr().ok();
        let congestion = conn.sock.congestion().ok();
        conn.write_chunk = self.settings.write_chunk_under(congestion.as_deref());
        let who = conn.describe();
        if let Some(p) = self.peers.get_mut(&rank) {
            p.state = PeerState::Established(id);
            p.redials = 0;
        }
        self.log(
            LogLevel::Info,
            &format!(
                "connected to {who} from {}, congestion control {}",
                local.map_or_else(|| "?".to_owned(), |a| a.to_string()),
                congestion.as_deref().unwrap_or("?")
            ),
        );
        self.flush(rank);
    }
}
