//! Selective signalling of one send queue.
//!
//! Most send requests are posted unsignalled: they make no completion
//! entry, which saves the device a write and the poller a read. A reliable
//! connection completes its send queue in order, so one signalled request
//! tells that every request posted before it is done too. [`SendQueue`]
//! keeps what each posted request holds (a send buffer, an RDMA cookie) in
//! posting order and decides which requests are signalled:
//!
//! - every request whose caller needs its own completion (RDMA);
//! - at least every `interval`-th request, so buffers come back steadily;
//! - the request that fills the queue, so a full queue always has a
//!   signalled request in it whose completion frees room.
//!
//! A signalled completion releases exactly the requests posted up to and
//! including it, each once and in order. When the connection breaks the
//! device flushes every request with an error; [`SendQueue::fail_all`]
//! releases whatever a flush did not report.

use std::collections::VecDeque;
use std::fmt;

/// Why a request cannot be posted or a completion not be matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalError {
    /// The queue holds its depth of requests.
    Full,
    /// A completion names no signalled request in the queue.
    UnknownCompletion(u64),
}

impl fmt::Display for SignalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("send queue full"),
            Self::UnknownCompletion(id) => {
                write!(
                    f,
                    "completion of request {id}, which is not outstanding and signalled"
                )
            }
        }
    }
}

impl std::error::Error for SignalError {}

/// How to post a request: its id (the `wr_id`) and whether it is
/// signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Post {
    /// Work-request id to post with.
    pub id: u64,
    /// Whether to set `IBV_SEND_SIGNALED`.
    pub signalled: bool,
}

#[derive(Debug)]
struct Entry<T> {
    id: u64,
    signalled: bool,
    item: T,
}

/// The requests posted on one send queue and not known complete.
#[derive(Debug)]
pub struct SendQueue<T> {
    entries: VecDeque<Entry<T>>,
    depth: usize,
    interval: usize,
    unsignalled_run: usize,
    next_id: u64,
}

impl<T> SendQueue<T> {
    /// A queue of `depth` requests (at least 1) that signals at least
    /// every `interval`-th (clamped to `1..=depth`).
    pub fn new(depth: usize, interval: usize) -> Self {
        let depth = depth.max(1);
        Self {
            entries: VecDeque::with_capacity(depth),
            depth,
            interval: interval.clamp(1, depth),
            unsignalled_run: 0,
            next_id: 0,
        }
    }

    /// Requests posted and not known complete.
    pub fn outstanding(&self) -> usize {
        self.entries.len()
    }

    /// Whether another request fits.
    pub fn has_room(&self) -> bool {
        self.entries.len() < self.depth
    }

    /// Records a request about to be posted; `must_signal` when its caller
    /// needs its completion. The answer says how to post it. If posting
    /// then fails, [`SendQueue::unpost`] takes it back.
    pub fn post(&mut self, item: T, must_signal: bool) -> Result<Post, SignalError> {
        if !self.has_room() {
            return Err(SignalError::Full);
        }
        let signalled = must_signal
            || self.unsignalled_run + 1 >= self.interval
            || self.entries.len() + 1 == self.depth;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.unsignalled_run = if signalled {
            0
        } else {
            self.unsignalled_run + 1
        };
        self.entries.push_back(Entry {
            id,
            signalled,
            item,
        });
        Ok(Post { id, signalled })
    }

    /// Takes back the last request recorded, whose post failed.
    pub fn unpost(&mut self, id: u64) -> Option<T> {
        if self.entries.back().map(|e| e.id) != Some(id) {
            return None;
        }
        let e = self.entries.pop_back()?;
        self.next_id = id;
        // The run before it is not known; counting it as full makes the
        // next request signalled, which is always safe.
        self.unsignalled_run = self.interval;
        Some(e.item)
    }

    /// A signalled request completed: every request up to and including
    /// it, oldest first.
    pub fn complete(&mut self, id: u64) -> Result<Vec<T>, SignalError> {
        let Some(pos) = self.entries.iter().position(|e| e.id == id) else {
            return Err(SignalError::UnknownCompletion(id));
        };
        if !self.entries.get(pos).is_some_and(|e| e.signalled) {
            return Err(SignalError::UnknownCompletion(id));
        }
        Ok(self.entries.drain(..=pos).map(|e| e.item).collect())
    }

    /// A request completed with an error, signalled or not (a flush
    /// reports every request): that request and every one before it.
    pub fn complete_failed(&mut self, id: u64) -> Vec<T> {
        match self.entries.iter().position(|e| e.id == id) {
            Some(pos) => self.entries.drain(..=pos).map(|e| e.item).collect(),
            None => Vec::new(),
        }
    }

    /// Whether the newest request is unsignalled: until another request
    /// follows it, nothing reports its completion.
    pub fn unsignalled_tail(&self) -> bool {
        self.entries.back().is_some_and(|e| !e.signalled)
    }

    /// What each outstanding request holds, oldest first.
    pub fn items_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().map(|e| &mut e.item)
    }

    /// Every request still recorded, oldest first (the connection is gone).
    pub fn fail_all(&mut self) -> Vec<T> {
        self.unsignalled_run = 0;
        self.entries.drain(..).map(|e| e.item).collect()
    }
}
