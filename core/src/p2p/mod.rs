//! Tagged point-to-point messaging without I/O: the envelopes of MPI-style
//! messages and the engine that matches arriving messages with posted
//! receives (MPI 4.0 §3.5 "Message Envelope", §3.8 "Probe and Cancel").
//!
//! This module owns the envelope types ([`Envelope`], [`RecvSpec`]) and the
//! matching engine ([`MatchEngine`]). The host drives it: it posts
//! receives, hands it each message it takes off a transport with the
//! message's per-sender sequence number, and acts on the events the engine
//! answers (copy a payload into a matched receive's buffer, start a
//! rendezvous, count an unexpected message against its bound). The engine
//! never reads a payload: a receive is the caller's handle `R`, a message
//! the caller's handle `M` (an eager payload, a rendezvous descriptor).
//!
//! # Envelopes and receive specifications
//!
//! A message's [`Envelope`] is its context (the communicator's
//! [`ContextId`]), its source (the sender's rank in that communicator) and
//! its tag. A receive names a context, a source or [`Source::Any`], and a
//! tag or [`Tag::Any`] ([`RecvSpec`]). Contexts are independent: a receive
//! never matches a message of another context. Any `i32` tag can be sent
//! and named; [`Tag::Any`] matches every tag of its context. Applications
//! use tags `>= 0` ([`RecvSpec::from_raw`] refuses others): a runtime that
//! wants its own traffic out of the way of `Tag::Any` gives it its own
//! context, as MPI does.
//!
//! # Matching order
//!
//! - An arriving message matches the *earliest posted* receive whose
//!   specification matches it.
//! - A posted receive matches the *earliest arrived* unexpected message
//!   that it matches ([`MatchEngine::probe`] shows that message,
//!   [`MatchEngine::take`] removes it).
//! - Non-overtaking: the messages of one sender on one context are matched
//!   in the order they were sent, however they arrive.
//!
//! "Arrived" means "handed to the matching rules": a message that comes
//! ahead of its predecessors is held (below) and counts as arriving when
//! it is released.
//!
//! # Sequence numbers and held messages
//!
//! Each message carries a `u32` sequence number, counted per (sender,
//! context) stream from 0 (or from a number agreed with the sender and
//! set with [`MatchEngine::set_next_seq`]) and wrapping from `u32::MAX` to
//! 0; a `u32` leaves a window of up to `2^31` in flight, where a `u16`
//! would make a deep stripe wrap within one window. The engine keeps the
//! next expected number of each stream. A message with that
//! number is matched at once, then the held messages that follow it
//! without a gap. A message `d` numbers ahead, `1 <= d <=`
//! [`MatchConfig::max_ahead`], is *held*: stored, neither matched nor
//! visible to probe. Numbers further ahead, numbers already passed
//! (`d >= 2^31`, that is, behind the expected number in wrapping order),
//! a number held twice, or more held messages than
//! [`MatchConfig::max_held`] are refused with an [`ArrivalError`], the
//! message handed back. Such a message is a protocol error of the sender
//! (or of the transports), never a reason for the engine to panic; a
//! refused message leaves no state behind.
//!
//! A transport that keeps order (one connection per peer) never causes a
//! hold; holds appear when a stream is striped over several transports.
//!
//! # Data structures and costs
//!
//! A receive sits in one of four bins of its context, by the shape of its
//! specification: exact (source, tag), any source with a tag, a source
//! with any tag, any source and any tag. Each bin is a FIFO list in post
//! order, and every receive carries a stamp of a global post counter. An
//! arriving message looks at the head of at most four bins (its exact bin,
//! its tag's any-source bin, its source's any-tag bin, the context's
//! wildcard bin) and takes the one with the smallest stamp: `O(1)`
//! expected, whatever the number of posted receives.
//!
//! An unexpected message sits in four arrival-ordered lists at once: its
//! exact (source, tag) list, its tag's list, its source's list and its
//! context's list. A receive of any shape reads the head of the one list
//! that holds exactly the messages it matches, so posting, probing and
//! taking are `O(1)` expected as well, wildcards included (no scan of the
//! unexpected messages, unlike a design with exact bins and one wildcard
//! list). The price is paid when a message is stored: four list
//! insertions, two of them in hash maps. Bins are hash map entries
//! ([`hashbrown`] with its default hasher, seeded per process: tags and
//! sources come from peers). A bin that empties stays for the next receive
//! or message with its key, so a ping-pong on one tag inserts and removes
//! no entry; once a map's empty bins outnumber its live ones (and 64, and
//! an eighth of its capacity) one pass drops them all, so that memory
//! follows the live receives and messages, not the tags ever used, at an
//! amortized `O(1)` per operation. Contexts, and the streams of each, sit
//! in vectors found through hash maps, the last one found remembered: a
//! run of operations on one context and one peer skips those lookups.
//! Receives and messages live in two slabs; the lists thread through them
//! by index, so that [`MatchEngine::cancel`] and the unlinking of a matched
//! message from its other lists are `O(1)`.
//!
//! A receive posted into a context with nothing queued and nothing
//! unexpected waits *alone*, in no bin: a blocking receive, each turn of a
//! ping-pong. The arrival that it takes looks up no bin, and
//! [`MatchEngine::arrive_lone`] serves that case on its own (an in-order
//! message the lone receive accepts, nothing held behind it) without
//! building an event. A second receive posted into the context first
//! lists the lone one in its bin, which keeps the post order.
//! [`MatchEngine::arrive_posted`] is the same shortcut for a context with
//! several receives queued (a window of posted `irecv`s): an in-order
//! message goes to the earliest-posted receive that accepts it, with one
//! exact-bin lookup and no event, or the call changes nothing.
//!
//! What is not `O(1)`: [`MatchEngine::fail_source`] visits the exact bins
//! of the context to find the receives naming the failed source, and
//! releasing `k` held messages costs `O(k)`. No call allocates once the
//! slabs and maps have grown to the working set, except
//! `fail_source`'s answer.
//!
//! # Failures
//!
//! [`MatchEngine::fail_source`] takes the unexpected and held messages of
//! one (context, source) out, and the receives that name that source (they
//! can only fail now); it remembers the failure, refusing later arrivals
//! from the source ([`ArrivalError::SourceFailed`]) and later receives
//! naming it ([`Posted::SourceFailed`]). Receives on [`Source::Any`] stay
//! posted and may still match other senders. The process-failure
//! semantics of MPI's fault-tolerance proposals (ULFM) are not handled
//! here: an any-source receive is not interrupted by a failure
//! (`MPI_ERR_PROC_FAILED_PENDING`), failures are not acknowledged per
//! communicator, and nothing is revoked; a host that offers these builds
//! them on top; so does a host that must fail a receive matched before the
//! failure whose rendezvous is still to come. Sources are communicator
//! ranks, so a failed process is reported once per context it belongs to,
//! with its rank there.
//!
//! # Contexts
//!
//! A context springs into being on its first receive or message (a peer
//! may send on a communicator before this process has made it locally).
//! [`MatchEngine::retire_context`] forgets a context's state, including its
//! streams' sequence numbers and failed sources, so that its id can be
//! reused with streams starting again at 0; it refuses while receives,
//! unexpected or held messages remain.
//!
//! # Example
//!
//! ```
//! use fireopal_core::p2p::{
//!     ContextId, Envelope, Event, MatchEngine, Posted, RecvSpec, Source, Tag,
//! };
//!
//! let world = ContextId(0);
//! // Receives are named by a string here, messages by their text.
//! let mut engine: MatchEngine<&str, &str> = MatchEngine::new();
//! let mut events = Vec::new();
//!
//! // A receive from anyone with tag 7, posted before anything arrives.
//! let spec = RecvSpec::new(world, Source::Any, Tag::Tag(7));
//! let Posted::Queued(_) = engine.post(spec, "recv A") else { panic!() };
//!
//! // Rank 3's message with sequence number 1 comes first: it is held.
//! let env = Envelope { context: world, source: 3, tag: 7 };
//! engine.arrive(env, 1, "second", 6, &mut events).unwrap();
//! assert!(events.is_empty());
//!
//! // Sequence number 0 releases both: the first matches the receive, the
//! // second is stored as unexpected.
//! engine.arrive(env, 0, "first", 5, &mut events).unwrap();
//! let Event::Matched { req, message, .. } = &events[0] else { panic!() };
//! assert_eq!((*req, message.msg), ("recv A", "first"));
//! assert!(matches!(events[1], Event::Stored { bytes: 6, .. }));
//! assert_eq!((engine.unexpected(), engine.unexpected_bytes()), (1, 6));
//!
//! // A later receive from rank 3 with any tag takes the stored one.
//! let spec = RecvSpec::new(world, Source::Rank(3), Tag::Any);
//! let Posted::Matched { message, .. } = engine.post(spec, "recv B") else { panic!() };
//! assert_eq!(message.msg, "second");
//! ```

mod bins;
mod error;
mod events;
mod list;
mod matching;
mod state;
mod table;
#[cfg(test)]
mod tests;

pub use error::{ArrivalError, ConfigError, Rejected, RetireError, SpecError, StreamError};
pub use events::{Arrival, Counts, Event, MatchConfig, Message, PostId, Posted, SourceFailure};
pub use matching::MatchEngine;

/// The raw source value that stands for "any source", as a C-like caller
/// passes it to [`RecvSpec::from_raw`] (MPICH's `MPI_ANY_SOURCE`).
pub const ANY_SOURCE: i32 = -2;

/// The raw tag value that stands for "any tag", as a C-like caller passes
/// it to [`RecvSpec::from_raw`] (`MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;

/// The largest tag an application may use; every `i32 >= 0` is valid.
pub const TAG_UB: i32 = i32::MAX;

/// The id of a communication context (a communicator's, or one of its
/// internal contexts): messages and receives of different contexts never
/// match each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContextId(pub u32);

/// What a message says about itself: its context, its sender's rank in
/// that context's communicator, and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// The context the message was sent on.
    pub context: ContextId,
    /// The sender's rank in the context's communicator.
    pub source: u32,
    /// The tag it was sent with.
    pub tag: i32,
}

/// The source a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any sender of the context (`MPI_ANY_SOURCE`).
    Any,
    /// Only this rank of the context's communicator.
    Rank(u32),
}

/// The tag a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// Any tag (`MPI_ANY_TAG`).
    Any,
    /// Only this tag.
    Tag(i32),
}

/// What a receive (or probe) accepts: one context, a source or any, a tag
/// or any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvSpec {
    /// The context; only messages of this context match.
    pub context: ContextId,
    /// The source accepted.
    pub source: Source,
    /// The tag accepted.
    pub tag: Tag,
}

impl RecvSpec {
    /// A specification from its three parts.
    pub const fn new(context: ContextId, source: Source, tag: Tag) -> Self {
        RecvSpec {
            context,
            source,
            tag,
        }
    }

    /// A specification from the raw values a C-like caller holds: `source`
    /// is a rank `>= 0` or [`ANY_SOURCE`], `tag` a tag `>= 0` or
    /// [`ANY_TAG`]. Other negative values (including `MPI_PROC_NULL`,
    /// whose receives the caller completes without matching) are refused.
    pub const fn from_raw(context: ContextId, source: i32, tag: i32) -> Result<Self, SpecError> {
        let source = match source {
            ANY_SOURCE => Source::Any,
            s if s >= 0 => Source::Rank(s as u32),
            s => return Err(SpecError::BadSource(s)),
        };
        let tag = match tag {
            ANY_TAG => Tag::Any,
            t if t >= 0 => Tag::Tag(t),
            t => return Err(SpecError::BadTag(t)),
        };
        Ok(RecvSpec::new(context, source, tag))
    }

    /// Whether a message with envelope `env` matches this specification.
    pub fn matches(&self, env: &Envelope) -> bool {
        self.context == env.context
            && match self.source {
                Source::Any => true,
                Source::Rank(r) => r == env.source,
            }
            && match self.tag {
                Tag::Any => true,
                Tag::Tag(t) => t == env.tag,
            }
    }
}

impl Envelope {
    /// The exact specification of this envelope: the receive that matches
    /// only messages like this one.
    pub const fn exact_spec(&self) -> RecvSpec {
        RecvSpec::new(self.context, Source::Rank(self.source), Tag::Tag(self.tag))
    }
}
