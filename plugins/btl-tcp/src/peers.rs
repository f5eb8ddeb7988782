//! Peers: which entry of a peer's address list this module talks to,
//! and dialling it.

use std::net::SocketAddr;
use std::time::Instant;

use fireopal_abi::btl::{PeerAddress, Rank, Reachability};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::address::parse_addresses;

use crate::config::Congestion;
use crate::conn::Phase;
use crate::module::{io_error, Peer, PeerState, Target, TcpModule};
use crate::select::partner;
use crate::sys::Socket;

impl TcpModule {
    pub(crate) fn unknown_peer(&self, peer: Rank) -> PluginError {
        PluginError::new(
            ErrorKind::UNREACHABLE,
            format!("rank {peer} was not added to this tcp module"),
        )
    }

    /// Gives the connection `sock` (to or from `addr`; `which` names it
    /// in the log) the congestion control `btl_tcp_congestion` chooses. A
    /// refusal leaves the system's default and is logged: the connection
    /// works either way.
    pub(crate) fn choose_congestion(
        &self,
        sock: &Socket,
        addr: SocketAddr,
        which: std::fmt::Arguments<'_>,
    ) {
        let Some(name) = self
            .settings
            .congestion
            .for_peer(addr.ip(), &self.settings.host_ips)
        else {
            return;
        };
        if let Err(e) = sock.set_congestion(name) {
            // `auto` is a preference; a name the user gave was checked
            // at open, so its refusal here is news.
            let level = match self.settings.congestion {
                Congestion::Auto => LogLevel::Debug,
                _ => LogLevel::Warn,
            };
            self.log(
                level,
                &format!("cannot give the connection {which} the congestion control {name}: {e}"),
            );
        }
    }

    /// Starts connecting to `rank` (which must be Idle).
    pub(crate) fn connect(&mut self, rank: Rank) -> Result<(), PluginError> {
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        let Some(target) = peer.target else {
            let e = PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {rank} has no published tcp address to dial"),
            );
            self.fail_peer(rank, e.clone());
            return Err(e);
        };
        let sock = match Socket::connect(target.addr, self.settings.buffers) {
            Ok(s) => s,
            Err(e) => {
                let err = PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("cannot connect to rank {rank} at {}: {e}", target.addr),
                );
                self.fail_peer(rank, err.clone());
                return Err(err);
            }
        };
        if let Err(e) = sock.set_liveness(self.settings.keepalive, self.settings.user_timeout_ms) {
            self.log(
                LogLevel::Warn,
                &format!("cannot set the dead-peer timeouts of the connection to rank {rank}: {e}"),
            );
        }
        self.choose_congestion(&sock, target.addr, format_args!("to rank {rank}"));
        let deadline = Instant::now() + self.settings.handshake_timeout;
        let mut conn = crate::conn::Conn::new(sock, Phase::Connecting, Some(rank), deadline);
        conn.remote = Some(target.addr);
        conn.want_write = true;
        let id = self.conns.insert(conn);
        let watched = self
            .conns
            .get(id)
            .map(|c| self.epoll.add(&c.sock, id.token(), true));
        if let Some(Err(e)) = watched {
            self.conns.remove(id);
            let err = io_error("cannot watch a socket", &e);
            self.fail_peer(rank, err.clone());
            return Err(err);
        }
        if let Some(p) = self.peers.get_mut(&rank) {
            p.state = PeerState::Connecting(id);
        }
        self.log(
            LogLevel::Debug,
            &format!("connecting to rank {rank} at {}", target.addr),
        );
        Ok(())
    }

    /// Makes sure a connection to `rank` is up or being made. Fails for
    /// unknown and failed peers, and when a new connection cannot be
    /// started (which fails the peer); nothing of the caller's is queued
    /// yet then, so no completion follows such an error.
    pub(crate) fn ensure_connection(&mut self, rank: Rank) -> Result<(), PluginError> {
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        match &peer.state {
            PeerState::Failed(e) => Err(e.clone()),
            PeerState::Idle => self.connect(rank),
            // Queued; the next dial carries it.
            PeerState::Redial(_) => Ok(()),
            _ => Ok(()),
        }
    }

    /// One entry of `add_peers`.
    pub(crate) fn add_peer(&mut self, p: &PeerAddress<'_>) -> Reachability {
        if p.rank == self.me {
            return Reachability::Unreachable("tcp does not carry messages to oneself".into());
        }
        if p.rank >= self.size {
            return Reachability::Unreachable(
                format!("rank {} is outside the job of {}", p.rank, self.size).into(),
            );
        }
        if let Some(reason) = self.unreachable.get(&p.rank) {
            return Reachability::Unreachable(reason.as_str().into());
        }
        if let Some(peer) = self.peers.get(&p.rank) {
            if peer.target.is_some() {
                return Reachability::Reachable;
            }
        }
        match self.choose_target(p) {
            Ok(target) => {
                self.peers
                    .entry(p.rank)
                    .or_insert_with(|| Peer::new(None))
                    .target
                    .get_or_insert(target);
                Reachability::Reachable
            }
            Err(reason) => {
                if self.peers.contains_key(&p.rank) {
                    // Connected to us already: usable, just not dialable.
                    return Reachability::Reachable;
                }
                self.unreachable.insert(p.rank, reason.clone());
                Reachability::Unreachable(reason.into())
            }
        }
    }

    /// The peer's socket our entry pairs with.
    pub(crate) fn choose_target(&self, p: &PeerAddress<'_>) -> Result<Target, String> {
        let theirs = match parse_addresses(p.address.as_slice()) {
            Ok(list) => list,
            Err(e) => {
                self.log(
                    LogLevel::Warn,
                    &format!("rank {} published a bad tcp address: {e}", p.rank),
                );
                return Err(format!("bad published address: {e}"));
            }
        };
        let j = partner(
            &self.entries,
            self.entry,
            &theirs,
            self.me < p.rank,
            p.node_local,
        )
        .ok_or_else(|| {
            let mine = self
                .my_entry()
                .map_or_else(String::new, |e| format!("{} {}", e.name, e.ip));
            format!(
                "no interface of rank {} pairs with {mine} link {}",
                p.rank,
                self.link()
            )
        })?;
        let e = theirs
            .get(j)
            .ok_or_else(|| "pairing out of range".to_owned())?;
        Ok(Target {
            addr: SocketAddr::new(e.ip, e.port),
            entry: j as u8,
        })
    }
}
