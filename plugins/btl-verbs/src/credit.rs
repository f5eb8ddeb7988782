//! Credit-based flow control of one connection over a shared receive
//! queue.
//!
//! Each module grants every peer a number of fragments (`credits` in its
//! published address) it may have in flight toward it; the shared receive
//! queue is sized for the peers' grants, so a sender that keeps to its
//! credits never meets an empty queue (which would stall the connection
//! in receiver-not-ready retries). One [`Credits`] holds both directions
//! of one peer:
//!
//! - sending: a message fragment takes a credit; the peer returns credits
//!   in the `credits` field of any fragment it sends back;
//! - receiving: every message fragment consumed is owed back; what is owed
//!   rides on the next fragment to the peer, or, once half the grant is
//!   owed and nothing else is going there, in a credit update of its own.
//!
//! Credit updates take no credit, so returning credits never waits for
//! credits. At most one update per peer is in flight at a time; the
//! receive queue holds one buffer per peer beyond the grants for it.
//! Counts never go negative or above the grant: a peer that sends without
//! credit, or returns more than it was given, is reported as a
//! [`CreditError`] and never wraps a counter.

use std::fmt;

/// A peer broke the credit protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditError {
    /// The peer returned more credits than were outstanding.
    TooManyReturned {
        /// Credits in the fragment.
        returned: u32,
        /// Credits that were outstanding.
        outstanding: u32,
    },
    /// The peer sent a message fragment beyond the credits granted to it.
    Overrun {
        /// The grant.
        granted: u32,
    },
}

impl fmt::Display for CreditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyReturned {
                returned,
                outstanding,
            } => write!(
                f,
                "peer returned {returned} credits with only {outstanding} outstanding"
            ),
            Self::Overrun { granted } => {
                write!(f, "peer sent beyond the {granted} fragments granted to it")
            }
        }
    }
}

impl std::error::Error for CreditError {}

/// Flow-control state of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credits {
    /// What the peer granted this process.
    send_grant: u32,
    /// Credits this process may still spend.
    available: u32,
    /// What this process granted the peer.
    recv_grant: u32,
    /// Fragments of the peer consumed and not yet returned.
    owed: u32,
    /// Whether a credit update to the peer is in flight.
    update_in_flight: bool,
}

impl Credits {
    /// A connection whose peer granted `send_grant` fragments and to which
    /// this process granted `recv_grant` (both at least 1).
    pub fn new(send_grant: u16, recv_grant: u16) -> Self {
        let send_grant = u32::from(send_grant.max(1));
        Self {
            send_grant,
            available: send_grant,
            recv_grant: u32::from(recv_grant.max(1)),
            owed: 0,
            update_in_flight: false,
        }
    }

    /// Credits this process may spend now.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// Credits this process owes the peer.
    pub fn owed(&self) -> u32 {
        self.owed
    }

    /// Takes a credit for a message fragment; `false` (nothing taken)
    /// when none is left.
    pub fn try_take(&mut self) -> bool {
        match self.available.checked_sub(1) {
            Some(left) => {
                self.available = left;
                true
            }
            None => false,
        }
    }

    /// Gives back a credit taken for a fragment that was not posted after
    /// all.
    pub fn untake(&mut self) {
        self.available = (self.available + 1).min(self.send_grant);
    }

    /// The peer returned `n` credits (the `credits` field of a fragment).
    pub fn returned(&mut self, n: u16) -> Result<(), CreditError> {
        let n = u32::from(n);
        let outstanding = self.send_grant - self.available;
        if n > outstanding {
            return Err(CreditError::TooManyReturned {
                returned: n,
                outstanding,
            });
        }
        self.available += n;
        Ok(())
    }

    /// A message fragment of the peer was consumed (its buffer goes back
    /// to the receive queue): one more credit is owed.
    pub fn consumed(&mut self) -> Result<(), CreditError> {
        if self.owed >= self.recv_grant {
            return Err(CreditError::Overrun {
                granted: self.recv_grant,
            });
        }
        self.owed += 1;
        Ok(())
    }

    /// Takes what is owed, to ride on a fragment going to the peer.
    pub fn piggyback(&mut self) -> u16 {
        let n = self.owed.min(u32::from(u16::MAX));
        self.owed -= n;
        n as u16
    }

    /// Whether a credit update should go to the peer now: half the grant
    /// (at least one) is owed and no update is in flight.
    pub fn wants_update(&self) -> bool {
        !self.update_in_flight && self.owed > 0 && self.owed >= self.recv_grant.div_ceil(2)
    }

    /// Starts a credit update: what it returns.
    pub fn start_update(&mut self) -> u16 {
        self.update_in_flight = true;
        self.piggyback()
    }

    /// The credit update in flight completed.
    pub fn update_done(&mut self) {
        self.update_in_flight = false;
    }

    /// Whether a credit update is in flight.
    pub fn update_in_flight(&self) -> bool {
        self.update_in_flight
    }
}
