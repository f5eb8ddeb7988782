//! The matching engine: posted receives, unexpected and held messages, and
//! the per-stream sequence numbers that keep each sender's messages in
//! order. The [module documentation](super) gives the rules and costs.

use alloc::vec::Vec;
use core::fmt;

use hashbrown::hash_map::Entry;

use super::bins::Bin;
use super::error::{ArrivalError, ConfigError, Rejected, RetireError, StreamError};
use super::events::{Arrival, Counts, Event, MatchConfig, Message, PostId, Posted, SourceFailure};
use super::list::{push_new, Link, Slab};
use super::state::{
    deliver, detach_post, first_unexpected, remove_listed, remove_msg, remove_unexpected,
    take_posted, Context, Held, PostNode, Store, Stream, Tally, HALF,
};
use super::table::Table;
use super::{ContextId, Envelope, RecvSpec, Source, Tag};

/// The matching engine of one process; see the [module
/// documentation](super). `R` is the caller's receive handle, `M` its
/// message handle; the engine moves them and never looks inside.
pub struct MatchEngine<R, M> {
    config: MatchConfig,
    contexts: Table<Context<M>>,
    store: Store<R, M>,
    next_stamp: u64,
}

impl<R, M> fmt::Debug for MatchEngine<R, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MatchEngine")
            .field("config", &self.config)
            .field("contexts", &self.contexts.len())
            .field("counts", &self.counts())
            .finish()
    }
}

impl<R, M> Default for MatchEngine<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> MatchEngine<R, M> {
    /// An empty engine with the default [`MatchConfig`].
    pub fn new() -> Self {
        MatchEngine {
            config: MatchConfig::default(),
            contexts: Table::default(),
            store: Store {
                posts: Slab::default(),
                msgs: Slab::default(),
                tally: Tally::default(),
            },
            next_stamp: 0,
        }
    }

    /// An empty engine with these limits.
    pub fn with_config(config: MatchConfig) -> Result<Self, ConfigError> {
        if config.max_ahead >= HALF {
            return Err(ConfigError::WindowTooLarge(config.max_ahead));
        }
        let mut engine = Self::new();
        engine.config = config;
        Ok(engine)
    }

    /// The engine's limits.
    pub fn config(&self) -> MatchConfig {
        self.config
    }

    /// Posts a receive: it takes the earliest-arrived unexpected message
    /// that matches `spec`, or else is queued behind the receives posted
    /// before it. `O(1)` expected for every shape of `spec`.
    #[inline]
    pub fn post(&mut self, spec: RecvSpec, req: R) -> Posted<R, M> {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        let ctx = self
            .contexts
            .get_or_insert_with(spec.context, || Context::new(spec.context));
        let store = &mut self.store;
        let t = &ctx.bins.tally;
        if t.posted == 0 && t.unexpected == 0 && ctx.failed_sources == 0 {
            // Nothing to take and nothing queued: the receive waits alone,
            // on a path short enough to be inlined into the caller's.
            let idx = store.posts.insert(PostNode {
                spec,
                stamp,
                req,
                link: [Link::UNLINKED],
            });
            ctx.lone = Some(idx);
            ctx.bins.tally.posted += 1;
            store.tally.posted += 1;
            return Posted::Queued(PostId { idx, stamp });
        }
        self.post_behind(spec, req, stamp)
    }

    /// [`post`](Self::post) where the context has receives or messages
    /// already.
    #[inline(never)]
    fn post_behind(&mut self, spec: RecvSpec, req: R, stamp: u64) -> Posted<R, M> {
        let ctx = self
            .contexts
            .get_or_insert_with(spec.context, || Context::new(spec.context));
        let store = &mut self.store;
        ctx.list_lone(&mut store.posts);
        // A failed source's messages that arrived before the failure are
        // still taken (see `fail_source_keeping_arrived`).
        let list = match (spec.source, spec.tag) {
            (Source::Rank(s), Tag::Tag(t)) => {
                let failed = ctx.source_failed(s);
                // One lookup of the exact bin, to take from it or queue in it.
                let bin = match ctx.exact.map.entry((s, t)) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(v) => {
                        if failed {
                            return Posted::SourceFailed(req);
                        }
                        ctx.exact.empty += 1;
                        v.insert(Bin::default())
                    }
                };
                if let Some(idx) = bin.unexpected.head() {
                    if let Some(stream) = ctx.streams.get_mut(s) {
                        let taken = remove_listed(bin, &mut ctx.bins, &mut stream.bin, store, idx);
                        if let Some(message) = taken {
                            if bin.is_empty() {
                                ctx.exact.emptied(1);
                            }
                            return Posted::Matched { req, message };
                        }
                    }
                }
                if failed {
                    return Posted::SourceFailed(req);
                }
                if bin.is_empty() {
                    ctx.exact.empty -= 1;
                }
                &mut bin.posted
            }
            _ => {
                if let Some(idx) = first_unexpected(ctx, spec) {
                    if let Some(message) = remove_unexpected(ctx, store, idx) {
                        return Posted::Matched { req, message };
                    }
                }
                match (spec.source, spec.tag) {
                    (Source::Any, Tag::Tag(t)) => {
                        ctx.bins.any_source_posts += 1;
                        &mut ctx.bins.by_tag.filling(t).posted
                    }
                    (Source::Rank(s), _) => {
                        if ctx.source_failed(s) {
                            return Posted::SourceFailed(req);
                        }
                        let stream = ctx.streams.get_or_insert_with(s, || Stream::new(s));
                        &mut stream.bin.posted
                    }
                    (Source::Any, Tag::Any) => &mut ctx.bins.any.posted,
                }
            }
        };
        let idx = push_new(&mut store.posts, [list], |link| PostNode {
            spec,
            stamp,
            req,
            link,
        });
        ctx.bins.tally.posted += 1;
        store.tally.posted += 1;
        Posted::Queued(PostId { idx, stamp })
    }

    /// Hands the engine a message that arrived with sequence number `seq`
    /// on its (source, context) stream; `bytes` is its size as the caller
    /// counts it (the unexpected-bytes total adds it up).
    ///
    /// If `seq` is the next number of the stream, the message, then every
    /// held message that now follows without a gap, goes to matching: each
    /// matches the earliest-posted receive that accepts it or is stored as
    /// unexpected, and one [`Event`] per message is appended to `out`
    /// (pass a `Vec` kept between calls to avoid allocating). If `seq` is
    /// ahead, the message is held and `out` is untouched. `O(1)` expected
    /// per message, `O(1 + released)` per call.
    ///
    /// # Errors
    ///
    /// A refused message (see [`ArrivalError`]) comes back inside
    /// [`Rejected`]; the engine is unchanged.
    pub fn arrive<E>(
        &mut self,
        envelope: Envelope,
        seq: u32,
        msg: M,
        bytes: usize,
        out: &mut E,
    ) -> Result<Arrival, Rejected<M>>
    where
        E: Extend<Event<R, M>>,
    {
        self.arrive_with(envelope, seq, msg, bytes, out, |m| m)
    }

    /// The commonest arrival on its own: if `seq` is the next number of
    /// its stream, nothing is held after it and the context's lone
    /// receive (the only one queued, see the [module
    /// documentation](super)) accepts `envelope`, the message is taken
    /// by that receive, which is returned, as [`arrive`](Self::arrive)
    /// would match it. Otherwise nothing changes and `None` says to call
    /// [`arrive`](Self::arrive). `O(1)`, with no hashing while the
    /// context and the stream are the last ones used.
    #[inline]
    pub fn arrive_lone(&mut self, envelope: Envelope, seq: u32) -> Option<(PostId, R)> {
        let ctx = self.contexts.get_mut(envelope.context)?;
        let idx = ctx.lone?;
        let stream = ctx.streams.get_mut(envelope.source)?;
        if stream.expected != seq || stream.failed || !stream.held.is_empty() {
            return None;
        }
        let store = &mut self.store;
        let node = store
            .posts
            .remove_if(idx, |node| node.spec.matches(&envelope))?;
        stream.expected = seq.wrapping_add(1);
        ctx.lone = None;
        ctx.bins.tally.posted -= 1;
        store.tally.posted -= 1;
        Some((
            PostId {
                idx,
                stamp: node.stamp,
            },
            node.req,
        ))
    }

    /// The next commonest arrival: if `seq` is the next number of its
    /// stream, nothing is held after it, the context has no lone receive
    /// and a queued receive accepts `envelope`, the earliest-posted such
    /// receive takes the message and is returned, as
    /// [`arrive`](Self::arrive) would match it. Otherwise nothing changes
    /// and `None` says to call [`arrive`](Self::arrive) (which stores the
    /// message as unexpected, or holds it). `O(1)` expected: one exact-bin
    /// lookup, no event, nothing stored.
    pub fn arrive_posted(&mut self, envelope: Envelope, seq: u32) -> Option<(PostId, R)> {
        let ctx = self.contexts.get_mut(envelope.context)?;
        if ctx.lone.is_some() || ctx.bins.tally.posted == 0 {
            return None;
        }
        let Context {
            exact,
            bins,
            streams,
            ..
        } = ctx;
        let stream = streams.get_mut(envelope.source)?;
        if stream.expected != seq || stream.failed || !stream.held.is_empty() {
            return None;
        }
        let store = &mut self.store;
        let exact_bin = exact.map.get_mut(&(envelope.source, envelope.tag));
        let taken = take_posted(
            exact_bin,
            bins,
            &mut stream.bin,
            &mut store.posts,
            &envelope,
        )?;
        if taken.emptied_exact {
            exact.emptied(1);
        }
        stream.expected = seq.wrapping_add(1);
        bins.tally.posted -= 1;
        store.tally.posted -= 1;
        Some((
            PostId {
                idx: taken.idx,
                stamp: taken.node.stamp,
            },
            taken.node.req,
        ))
    }

    /// [`arrive`](Self::arrive), with `keep` applied to the message before
    /// the engine keeps it (held, or stored as unexpected), and only then.
    /// A caller whose message handle borrows bytes valid during the call
    /// (a transport's receive buffer) passes the borrowed form and copies
    /// in `keep`: a message that matches a posted receive at once comes
    /// back in its [`Event::Matched`] still borrowed, and is copied once,
    /// into the receive's buffer. A refused message comes back unchanged.
    pub fn arrive_with<E>(
        &mut self,
        envelope: Envelope,
        seq: u32,
        msg: M,
        bytes: usize,
        out: &mut E,
        keep: impl FnOnce(M) -> M,
    ) -> Result<Arrival, Rejected<M>>
    where
        E: Extend<Event<R, M>>,
    {
        let config = self.config;
        let store = &mut self.store;
        let context = envelope.context;
        let ctx = self
            .contexts
            .get_or_insert_with(context, || Context::new(context));
        let Context {
            exact,
            bins,
            streams,
            lone,
            ..
        } = ctx;
        let source = envelope.source;
        let stream = streams.get_or_insert_with(source, || Stream::new(source));
        let expected = stream.expected;
        let ahead = seq.wrapping_sub(expected);
        let refusal = if stream.failed {
            ArrivalError::SourceFailed
        } else if ahead == 0 {
            stream.expected = seq.wrapping_add(1);
            let message = Message {
                envelope,
                msg,
                bytes,
            };
            out.extend(Some(deliver(
                exact,
                bins,
                &mut stream.bin,
                lone,
                store,
                message,
                keep,
            )));
            let mut released = 0;
            while !stream.held.is_empty() {
                let Some(h) = stream.held.remove(&stream.expected) else {
                    break;
                };
                stream.expected = stream.expected.wrapping_add(1);
                for t in [&mut store.tally, &mut bins.tally] {
                    t.held -= 1;
                    t.held_bytes -= h.bytes as u128;
                }
                let message = Message {
                    envelope: Envelope {
                        tag: h.tag,
                        ..envelope
                    },
                    msg: h.msg,
                    bytes: h.bytes,
                };
                out.extend(Some(deliver(
                    exact,
                    bins,
                    &mut stream.bin,
                    lone,
                    store,
                    message,
                    |m| m,
                )));
                released += 1;
            }
            return Ok(Arrival::Delivered { released });
        } else if ahead >= HALF {
            ArrivalError::Stale { seq, expected }
        } else if ahead > config.max_ahead {
            ArrivalError::TooFarAhead { seq, expected }
        } else if stream.held.contains_key(&seq) {
            ArrivalError::DuplicateHeld { seq }
        } else if store.tally.held >= config.max_held {
            ArrivalError::HeldLimit
        } else {
            let tag = envelope.tag;
            stream.held.insert(
                seq,
                Held {
                    tag,
                    msg: keep(msg),
                    bytes,
                },
            );
            for t in [&mut store.tally, &mut bins.tally] {
                t.held += 1;
                t.held_bytes += bytes as u128;
            }
            return Ok(Arrival::Held);
        };
        // Leave no state behind for a stream (or context) that only ever
        // saw refused messages.
        if stream.is_pristine() {
            ctx.streams.remove(source);
            if ctx.streams.is_empty() && ctx.lists_nothing() {
                self.contexts.remove(context);
            }
        }
        Err(Rejected {
            error: refusal,
            envelope,
            msg,
        })
    }

    /// The unexpected message the next receive posted with `spec` would
    /// match (`MPI_Iprobe`), left in place. Held messages are not seen.
    /// `O(1)` expected.
    pub fn probe(&self, spec: RecvSpec) -> Option<Message<&M>> {
        let ctx = self.contexts.get(spec.context)?;
        let node = self.store.msgs.get(first_unexpected(ctx, spec)?)?;
        Some(Message {
            envelope: node.env,
            msg: &node.msg,
            bytes: node.bytes,
        })
    }

    /// Removes and returns the message [`probe`](Self::probe) would show
    /// (`MPI_Improbe`: the caller then receives it with `MPI_Mrecv`, and no
    /// other receive can take it). A failed source's messages are gone
    /// already, so this never names one. `O(1)` expected.
    pub fn take(&mut self, spec: RecvSpec) -> Option<Message<M>> {
        let ctx = self.contexts.get_mut(spec.context)?;
        let idx = first_unexpected(ctx, spec)?;
        remove_unexpected(ctx, &mut self.store, idx)
    }

    /// Takes a queued receive out (`MPI_Cancel` of a receive not yet
    /// matched) and hands it back; `None` if it was matched, cancelled or
    /// failed already. `O(1)` expected.
    pub fn cancel(&mut self, id: PostId) -> Option<R> {
        let spec = match self.store.posts.get(id.idx) {
            Some(node) if node.stamp == id.stamp => node.spec,
            _ => return None,
        };
        let ctx = self.contexts.get_mut(spec.context)?;
        let store = &mut self.store;
        let node = store.posts.remove(id.idx)?;
        detach_post(ctx, &mut store.posts, id.idx, &node);
        ctx.bins.tally.posted -= 1;
        store.tally.posted -= 1;
        Some(node.req)
    }

    /// Fails `source` on `context`: takes out its unexpected and held
    /// messages and the queued receives that name it, and remembers the
    /// failure (later messages from it are refused, later receives naming
    /// it answer [`Posted::SourceFailed`]) until the context is retired.
    /// Receives on [`Source::Any`] stay. `O(k + e)` for `k` items taken out
    /// and `e` exact bins of the context. Call it once per context the
    /// failed process belongs to, with its rank in each.
    pub fn fail_source(&mut self, context: ContextId, source: u32) -> SourceFailure<R, M> {
        self.fail_source_with(context, source, false)
    }

    /// Like [`fail_source`](Self::fail_source), but the source's
    /// unexpected messages stay: they arrived in order before the
    /// failure, and later receives that name the source still take them
    /// (and [`probe`](Self::probe) shows them); only once none matches
    /// does such a receive answer [`Posted::SourceFailed`]. Held messages
    /// are taken out (their predecessors will never come).
    pub fn fail_source_keeping_arrived(
        &mut self,
        context: ContextId,
        source: u32,
    ) -> SourceFailure<R, M> {
        self.fail_source_with(context, source, true)
    }

    fn fail_source_with(
        &mut self,
        context: ContextId,
        source: u32,
        keep_unexpected: bool,
    ) -> SourceFailure<R, M> {
        let store = &mut self.store;
        let Context {
            exact,
            bins,
            streams,
            failed_sources,
            lone,
            ..
        } = self
            .contexts
            .get_or_insert_with(context, || Context::new(context));
        let stream = streams.get_or_insert_with(source, || Stream::new(source));
        if !stream.failed {
            stream.failed = true;
            *failed_sources += 1;
        }

        // Receives: the source's any-tag bin, then its exact bins, which
        // are left empty.
        let mut idxs: Vec<usize> = stream.bin.posted.iter(&store.posts, 0).collect();
        if let Some(idx) = *lone {
            if store.posts.get(idx).map(|n| n.spec.source) == Some(Source::Rank(source)) {
                *lone = None;
                idxs.push(idx);
            }
        }
        for idx in &idxs {
            stream.bin.posted.unlink(&mut store.posts, *idx, 0);
        }
        let mut emptied = 0;
        for (_, bin) in exact.map.iter_mut().filter(|(k, _)| k.0 == source) {
            if bin.posted.is_empty() {
                continue;
            }
            // A bin with posted receives holds no unexpected message (it
            // would have matched one), so it empties here.
            debug_assert!(bin.unexpected.is_empty());
            while let Some(idx) = bin.posted.head() {
                bin.posted.unlink(&mut store.posts, idx, 0);
                idxs.push(idx);
            }
            emptied += 1;
        }
        exact.emptied(emptied);
        let mut receives: Vec<(PostId, R)> = idxs
            .into_iter()
            .filter_map(|idx| {
                store.posts.remove(idx).map(|n| {
                    (
                        PostId {
                            idx,
                            stamp: n.stamp,
                        },
                        n.req,
                    )
                })
            })
            .collect();
        receives.sort_unstable_by_key(|(id, _)| id.stamp);
        bins.tally.posted -= receives.len();
        store.tally.posted -= receives.len();

        // Unexpected messages, oldest first.
        let mut messages = Vec::new();
        while let Some(idx) = stream.bin.unexpected.head().filter(|_| !keep_unexpected) {
            match remove_msg(exact, bins, &mut stream.bin, store, idx) {
                Some(m) => messages.push(m),
                None => break,
            }
        }

        // Held messages, in sequence order.
        let expected = stream.expected;
        let mut held: Vec<(u32, Held<M>)> = stream.held.drain().collect();
        held.sort_unstable_by_key(|(seq, _)| seq.wrapping_sub(expected));
        for (_, h) in held {
            for t in [&mut store.tally, &mut bins.tally] {
                t.held -= 1;
                t.held_bytes -= h.bytes as u128;
            }
            messages.push(Message {
                envelope: Envelope {
                    context,
                    source,
                    tag: h.tag,
                },
                msg: h.msg,
                bytes: h.bytes,
            });
        }
        SourceFailure { receives, messages }
    }

    /// Whether `source` was failed on `context` (and the context not
    /// retired since).
    pub fn source_failed(&self, context: ContextId, source: u32) -> bool {
        self.contexts
            .get(context)
            .and_then(|c| c.streams.get(source))
            .is_some_and(|s| s.failed)
    }

    /// Forgets `context`: its streams' sequence numbers (they start again
    /// at 0) and failed sources. An unknown context is already forgotten.
    ///
    /// # Errors
    ///
    /// [`RetireError::Busy`] while the context has queued receives,
    /// unexpected or held messages; nothing changes.
    pub fn retire_context(&mut self, context: ContextId) -> Result<(), RetireError> {
        let Some(ctx) = self.contexts.get(context) else {
            return Ok(());
        };
        let t = &ctx.bins.tally;
        if t.posted != 0 || t.unexpected != 0 || t.held != 0 {
            return Err(RetireError::Busy {
                context,
                posted: t.posted,
                unexpected: t.unexpected,
                held: t.held,
            });
        }
        self.contexts.remove(context);
        Ok(())
    }

    /// The sequence number `source`'s next message on `context` must carry
    /// to be matched at once.
    pub fn next_seq(&self, context: ContextId, source: u32) -> u32 {
        self.contexts
            .get(context)
            .and_then(|c| c.streams.get(source))
            .map_or(0, |s| s.expected)
    }

    /// Makes `seq` the number `source`'s next message on `context` must
    /// carry: a stream may start from any number agreed with its sender (a
    /// random start catches a sender that mixes up its streams).
    ///
    /// # Errors
    ///
    /// Refused while the stream holds messages, or after its source
    /// failed; nothing changes.
    pub fn set_next_seq(
        &mut self,
        context: ContextId,
        source: u32,
        seq: u32,
    ) -> Result<(), StreamError> {
        let stream = self
            .contexts
            .get_or_insert_with(context, || Context::new(context))
            .streams
            .get_or_insert_with(source, || Stream::new(source));
        if stream.failed {
            return Err(StreamError::SourceFailed);
        }
        if !stream.held.is_empty() {
            return Err(StreamError::Held {
                held: stream.held.len(),
            });
        }
        stream.expected = seq;
        Ok(())
    }

    /// What the whole engine holds.
    pub fn counts(&self) -> Counts {
        self.store.tally.counts()
    }

    /// What one context holds (all zero for an unknown one).
    pub fn context_counts(&self, context: ContextId) -> Counts {
        self.contexts
            .get(context)
            .map_or_else(Counts::default, |c| c.bins.tally.counts())
    }

    /// Queued receives.
    pub fn posted(&self) -> usize {
        self.store.tally.posted
    }

    /// Unexpected messages stored (held ones not included).
    pub fn unexpected(&self) -> usize {
        self.store.tally.unexpected
    }

    /// Sum of the `bytes` of the unexpected messages (saturated).
    pub fn unexpected_bytes(&self) -> u64 {
        self.counts().unexpected_bytes
    }

    /// Messages held out of order.
    pub fn held(&self) -> usize {
        self.store.tally.held
    }

    /// Contexts the engine keeps state for.
    pub fn contexts(&self) -> usize {
        self.contexts.len()
    }

    /// The engine's state, for the invariant checks of the unit tests.
    #[cfg(test)]
    pub(super) fn state(&self) -> (&Table<Context<M>>, &Store<R, M>) {
        (&self.contexts, &self.store)
    }
}
