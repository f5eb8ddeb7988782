//! [`Messenger::wait_until`]: progress until a condition holds, bounded by
//! a stall limit instead of a deadline.

use std::fmt;
use std::time::{Duration, Instant};

use super::{Messenger, ProgressError};

/// Why [`Messenger::wait_until`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// No module did any work for the stall limit, and the condition
    /// still did not hold.
    Stalled {
        /// The limit that passed without work.
        limit: Duration,
    },
    /// `progress` failed.
    Progress(ProgressError),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stalled { limit } => write!(
                f,
                "nothing arrived or completed for {:.1} s",
                limit.as_secs_f64()
            ),
            Self::Progress(e) => write!(f, "progress: {e}"),
        }
    }
}

impl std::error::Error for WaitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Stalled { .. } => None,
            Self::Progress(e) => Some(e),
        }
    }
}

/// Tells when a polling loop has seen no work for its limit, for loops a
/// runtime writes itself ([`Messenger::wait_until`] is one). The clock is
/// read once every [`StallWatch::POLLS`] idle polls, not on every poll, so
/// that the watch does not slow the loop it guards (a latency includes how
/// fast an arrival is noticed).
///
/// ```
/// use std::time::Duration;
/// use fireopal::btl::StallWatch;
///
/// let mut watch = StallWatch::new(Duration::from_secs(30));
/// // In a loop: `watch.stalled(messenger.progress()?)`.
/// assert!(!watch.stalled(1));
/// assert!(!watch.stalled(0));
/// ```
#[derive(Debug)]
pub struct StallWatch {
    limit: Duration,
    /// When the current stretch without work began; read lazily, at the
    /// first check, so that a wait that ends quickly never reads the clock.
    since: Option<Instant>,
    idle: u32,
    seen: bool,
}

impl StallWatch {
    /// Idle polls between two looks at the clock.
    pub const POLLS: u32 = 1024;

    /// A watch that reports a stall after `limit` without work.
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            since: None,
            idle: 0,
            seen: false,
        }
    }

    /// Notes one poll that did `work`; true once nothing happened for
    /// about the limit.
    pub fn stalled(&mut self, work: usize) -> bool {
        if work > 0 {
            self.seen = true;
            return false;
        }
        self.idle = self.idle.wrapping_add(1);
        if self.idle % Self::POLLS != 0 {
            return false;
        }
        let now = Instant::now();
        if std::mem::take(&mut self.seen) {
            self.since = Some(now);
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.duration_since(since) > self.limit
    }

    /// The limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

impl Messenger {
    /// Calls [`progress`](Self::progress) until `done` holds, checking it
    /// before the first call and after each. Gives up with
    /// [`WaitError::Stalled`] once no module did any work (nothing
    /// arrived, completed or was served) for `stall`: a limit on silence,
    /// not on the whole wait, so a long transfer that keeps moving never
    /// times out.
    ///
    /// Failed peers are left for [`take_failures`](Self::take_failures):
    /// `done` looks at them when they matter to the wait.
    pub fn wait_until(
        &mut self,
        mut done: impl FnMut(&mut Messenger) -> bool,
        stall: Duration,
    ) -> Result<(), WaitError> {
        let mut watch = StallWatch::new(stall);
        while !done(self) {
            let work = self.progress().map_err(WaitError::Progress)?;
            if watch.stalled(work) {
                return Err(WaitError::Stalled {
                    limit: watch.limit(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_seen_at_a_check_with_no_work_since_the_last() {
        let mut watch = StallWatch::new(Duration::ZERO);
        let polls = StallWatch::POLLS;
        assert!(!watch.stalled(1));
        assert!((1..polls).all(|_| !watch.stalled(0)));
        assert!(!watch.stalled(0), "the check after work");
        // A whole period without work: stalled at its check, not before.
        assert!((1..polls).all(|_| !watch.stalled(0)));
        std::thread::sleep(Duration::from_millis(1));
        assert!(watch.stalled(0));
    }

    #[test]
    fn a_busy_wait_never_stalls() {
        let mut watch = StallWatch::new(Duration::ZERO);
        for i in 0..10 * StallWatch::POLLS {
            assert!(!watch.stalled(usize::from(i % 7 == 0)));
        }
    }
}
