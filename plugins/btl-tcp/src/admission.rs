//! Who holds a handshake slot, how strangers are reported, and what a
//! dialler does when its connection is cut before the handshake ends.
//!
//! - A new incoming connection is always taken. When its source address
//!   already holds half of `btl_tcp_max_unauthenticated`, or the table is
//!   full, the oldest unproven connection is dropped to make room (from
//!   the same source when that bound was hit), one that has sent nothing
//!   first. A peer's handshake takes a round trip; a stranger's idle
//!   connections are the oldest, so they go first and never starve it.
//! - Dropped and refused strangers are reported by address, never by the
//!   rank they claim: the first from an address at once, the rest as one
//!   line per address and window ("N more ... in the last T s").
//! - A connection we dialled that is closed or reset before the Verdict
//!   is dialled again after a growing pause, a bounded number of times:
//!   the acceptor may have dropped it to make room, or not be listening
//!   yet. Only failures that prove the peer wrong (a bad proof, the wrong
//!   rank) fail it at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use fireopal_abi::btl::Rank;
use fireopal_abi::host::LogLevel;

use crate::conn::{ConnId, Phase};
use crate::module::{PeerState, TcpModule};

/// Dial attempts for one peer after the first, before it fails.
pub(crate) const MAX_REDIALS: u32 = 8;

/// Pause before the first re-dial; doubled for each one after.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// Longest pause between two dials.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// How long reports about one address are gathered into one line.
const REPORT_WINDOW: Duration = Duration::from_secs(10);

/// Addresses tracked by the report; the rest are counted together.
const MAX_REPORTED_ADDRESSES: usize = 256;

/// The pause before re-dial number `attempt` (1-based).
pub(crate) fn redial_pause(attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    (FIRST_PAUSE * factor).min(MAX_PAUSE)
}

/// Counts of strangers dropped per source address, reported once per
/// window.
#[derive(Debug, Default)]
pub(crate) struct StrangerReport {
    by_addr: HashMap<Option<IpAddr>, Window>,
    /// Events from addresses beyond [`MAX_REPORTED_ADDRESSES`].
    others: u64,
}

#[derive(Debug)]
struct Window {
    since: Instant,
    /// Events after the one logged when the window opened.
    more: u64,
    last_reason: String,
}

fn show(addr: Option<IpAddr>) -> String {
    addr.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string())
}

impl StrangerReport {
    /// Records one dropped connection; returns the line to log now, if
    /// any (the first from its address in a window).
    pub(crate) fn record(
        &mut self,
        addr: Option<IpAddr>,
        now: Instant,
        reason: &str,
    ) -> Option<String> {
        if let Some(w) = self.by_addr.get_mut(&addr) {
            w.more += 1;
            w.last_reason.clear();
            w.last_reason.push_str(reason);
            return None;
        }
        if self.by_addr.len() >= MAX_REPORTED_ADDRESSES {
            self.others += 1;
            return None;
        }
        self.by_addr.insert(
            addr,
            Window {
                since: now,
                more: 0,
                last_reason: reason.to_owned(),
            },
        );
        Some(format!("dropped connection from {}: {reason}", show(addr)))
    }

    /// Closes the windows that are over; returns their summary lines.
    pub(crate) fn flush(&mut self, now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        self.by_addr.retain(|addr, w| {
            let elapsed = now.duration_since(w.since);
            if elapsed < REPORT_WINDOW {
                return true;
            }
            if w.more > 0 {
                lines.push(format!(
                    "{} more connections from {} dropped in the last {} s (last: {})",
                    w.more,
                    show(*addr),
                    elapsed.as_secs(),
                    w.last_reason
                ));
            }
            false
        });
        if self.others > 0 && self.by_addr.len() < MAX_REPORTED_ADDRESSES {
            lines.push(format!(
                "{} more connections dropped from other addresses",
                self.others
            ));
            self.others = 0;
        }
        lines
    }
}

impl TcpModule {
    /// Makes room for a connection just accepted from `source`: drops the
    /// oldest unproven connection when `source` or the whole table is at
    /// its bound.
    pub(crate) fn make_room(&mut self, source: Option<IpAddr>, now: Instant) {
        let limit = self.settings.max_unauthenticated;
        let per_source = (limit / 2).max(1);
        let mut total = 0;
        let mut same = 0;
        // (silent, deadline) orders candidates: silent first, then oldest.
        let mut oldest: Option<((bool, Instant), ConnId)> = None;
        let mut oldest_same: Option<((bool, Instant), ConnId)> = None;
        for id in self.conns.ids() {
            let Some(c) = self.conns.get(id) else {
                continue;
            };
            if !c.phase.accepted() {
                continue;
            }
            total += 1;
            let silent = matches!(c.phase, Phase::AwaitHello) && c.hs_have == 0;
            let key = (!silent, c.deadline.unwrap_or(now));
            let from = c.remote.map(|a| a.ip());
            if oldest.is_none_or(|(k, _)| key < k) {
                oldest = Some((key, id));
            }
            if from == source {
                same += 1;
                if oldest_same.is_none_or(|(k, _)| key < k) {
                    oldest_same = Some((key, id));
                }
            }
        }
        let victim = if same >= per_source {
            oldest_same
        } else if total >= limit {
            oldest
        } else {
            None
        };
        if let Some((_, id)) = victim {
            let addr = self.conns.get(id).and_then(|c| c.remote).map(|a| a.ip());
            let reason = format!("{total} connections were authenticating; the oldest made room");
            self.close_conn(id);
            self.report_stranger(addr, now, &reason);
        }
    }

    /// Logs a dropped stranger through the rate-limited report.
    pub(crate) fn report_stranger(&mut self, addr: Option<IpAddr>, now: Instant, reason: &str) {
        if let Some(line) = self.strangers.record(addr, now, reason) {
            self.log(LogLevel::Warn, &line);
        }
    }

    /// Logs the summaries of report windows that are over.
    pub(crate) fn flush_stranger_report(&mut self, now: Instant) {
        for line in self.strangers.flush(now) {
            self.log(LogLevel::Warn, &line);
        }
    }

    /// A connection we dialled to `rank` was cut before the Verdict:
    /// schedules another dial and returns true, or returns false when
    /// the attempts are used up (the caller fails the peer).
    pub(crate) fn redial_later(&mut self, rank: Rank, id: ConnId, reason: &str) -> bool {
        let Some(peer) = self.peers.get_mut(&rank) else {
            return false;
        };
        if peer.redials >= MAX_REDIALS {
            return false;
        }
        peer.redials += 1;
        let attempt = peer.redials;
        let pause = redial_pause(attempt);
        peer.state = PeerState::Redial(Instant::now() + pause);
        self.redials_waiting += 1;
        self.close_conn(id);
        self.log(
            LogLevel::Info,
            &format!(
                "connection to rank {rank} cut during the handshake ({reason}); dialling again in {} ms (attempt {} of {})",
                pause.as_millis(),
                attempt + 1,
                MAX_REDIALS + 1
            ),
        );
        true
    }

    /// Dials the peers whose pause is over.
    pub(crate) fn redial_due(&mut self, now: Instant) {
        let due: Vec<Rank> = self
            .peers
            .iter()
            .filter(|(_, p)| matches!(p.state, PeerState::Redial(at) if at <= now))
            .map(|(&r, _)| r)
            .collect();
        for rank in due {
            if let Some(p) = self.peers.get_mut(&rank) {
                p.state = PeerState::Idle;
            }
            // A failure to dial fails the peer inside `connect`.
            let _ = self.connect(rank);
        }
        self.redials_waiting = self
            .peers
            .values()
            .filter(|p| matches!(p.state, PeerState::Redial(_)))
            .count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_are_capped() {
        assert_eq!(redial_pause(1), Duration::from_millis(10));
        assert_eq!(redial_pause(2), Duration::from_millis(20));
        assert_eq!(redial_pause(4), Duration::from_millis(80));
        assert_eq!(redial_pause(MAX_REDIALS), MAX_PAUSE);
        assert_eq!(redial_pause(u32::MAX), MAX_PAUSE);
        let total: Duration = (1..=MAX_REDIALS).map(redial_pause).sum();
        assert!(total < Duration::from_secs(3), "{total:?}");
    }

    #[test]
    fn a_stranger_is_reported_once_per_window_then_summarised() {
        let mut r = StrangerReport::default();
        let t0 = Instant::now();
        let a: Option<IpAddr> = Some("10.0.0.9".parse().unwrap());
        let b: Option<IpAddr> = Some("10.0.0.10".parse().unwrap());
        let first = r.record(a, t0, "bad magic").unwrap();
        assert!(first.contains("10.0.0.9") && first.contains("bad magic"));
        for _ in 0..2999 {
            assert!(r.record(a, t0, "bad magic").is_none());
        }
        assert!(r.record(b, t0, "timeout").is_some());
        assert!(r.flush(t0 + Duration::from_secs(1)).is_empty());
        let lines = r.flush(t0 + REPORT_WINDOW);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("2999 more connections from 10.0.0.9"));
        // A new window opens with a line of its own.
        assert!(r.record(a, t0 + REPORT_WINDOW, "bad magic").is_some());
    }

    #[test]
    fn the_report_is_bounded_in_addresses() {
        let mut r = StrangerReport::default();
        let t0 = Instant::now();
        for i in 0..(MAX_REPORTED_ADDRESSES as u32 + 100) {
            let addr = Some(IpAddr::from(i.to_be_bytes()));
            let _ = r.record(addr, t0, "x");
        }
        assert_eq!(r.by_addr.len(), MAX_REPORTED_ADDRESSES);
        assert_eq!(r.others, 100);
        let lines = r.flush(t0 + REPORT_WINDOW);
        assert!(lines.iter().any(|l| l.starts_with("100 more")), "{lines:?}");
    }
}
