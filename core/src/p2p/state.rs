//! The state behind the matching engine: receive and message nodes, the
//! bins they are listed in, the per-stream sequence numbers, and the
//! operations that move nodes between bins (matching an arrival, removing
//! an unexpected message, unlinking a receive).

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use super::events::{Counts, Event, Message, PostId};
use super::list::{Link, List, Node, Slab};
use super::{Envelope, RecvSpec, Source, Tag};

/// The link of an unexpected message in its exact (source, tag) list.
pub(super) const BY_EXACT: usize = 0;
/// The link of an unexpected message in its tag's list.
pub(super) const BY_TAG: usize = 1;
/// The link of an unexpected message in its source's list.
pub(super) const BY_SOURCE: usize = 2;
/// The link of an unexpected message in its context's list.
pub(super) const BY_CONTEXT: usize = 3;

/// Half the sequence space: a number this far or further ahead of the
/// expected one counts as behind it.
pub(super) const HALF: u32 = 1 << 31;

/// Running counts; byte sums cannot overflow a `u128`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tally {
    pub(super) posted: usize,
    pub(super) unexpected: usize,
    pub(super) unexpected_bytes: u128,
    pub(super) held: usize,
    pub(super) held_bytes: u128,
}

impl Tally {
    pub(super) fn counts(&self) -> Counts {
        let sat = |b: u128| u64::try_from(b).unwrap_or(u64::MAX);
        Counts {
            posted: self.posted,
            unexpected: self.unexpected,
            unexpected_bytes: sat(self.unexpected_bytes),
            held: self.held,
            held_bytes: sat(self.held_bytes),
        }
    }
}

/// A queued receive.
#[derive(Debug)]
pub(super) struct PostNode<R> {
    pub(super) spec: RecvSpec,
    pub(super) stamp: u64,
    pub(super) req: R,
    pub(super) link: [Link; 1],
}

impl<R> Node<1> for PostNode<R> {
    fn links(&self) -> &[Link; 1] {
        &self.link
    }
    fn links_mut(&mut self) -> &mut [Link; 1] {
        &mut self.link
    }
}

/// An unexpected message, in four lists.
#[derive(Debug)]
pub(super) struct MsgNode<M> {
    pub(super) env: Envelope,
    pub(super) bytes: usize,
    pub(super) msg: M,
    pub(super) links: [Link; 4],
}

impl<M> Node<4> for MsgNode<M> {
    fn links(&self) -> &[Link; 4] {
        &self.links
    }
    fn links_mut(&mut self) -> &mut [Link; 4] {
        &mut self.links
    }
}

/// The receives of one specification shape and key, and the unexpected
/// messages such receives would match.
#[derive(Debug, Default)]
pub(super) struct Bin {
    pub(super) posted: List,
    pub(super) unexpected: List,
}

impl Bin {
    pub(super) fn is_empty(&self) -> bool {
        self.posted.is_empty() && self.unexpected.is_empty()
    }
}

/// A message held until its predecessors arrive.
#[derive(Debug)]
pub(super) struct Held<M> {
    pub(super) tag: i32,
    pub(super) msg: M,
    pub(super) bytes: usize,
}

/// One (source, context) stream.
#[derive(Debug)]
pub(super) struct Stream<M> {
    /// The sequence number matched next.
    pub(super) expected: u32,
    /// Failed with `fail_source`.
    pub(super) failed: bool,
    /// Receives naming this source with any tag; every unexpected message
    /// of this source.
    pub(super) bin: Bin,
    /// Messages ahead of `expected`, by sequence number.
    pub(super) held: HashMap<u32, Held<M>>,
}

impl<M> Stream<M> {
    /// Whether the stream is as new: nothing to remember about it.
    pub(super) fn is_pristine(&self) -> bool {
        self.expected == 0 && !self.failed && self.bin.is_empty() && self.held.is_empty()
    }
}

impl<M> Default for Stream<M> {
    fn default() -> Self {
        Stream {
            expected: 0,
            failed: false,
            bin: Bin::default(),
            held: HashMap::new(),
        }
    }
}

/// The bins of a context other than its streams' (kept apart so that a
/// stream and the bins can be borrowed together).
#[derive(Debug, Default)]
pub(super) struct Bins {
    /// Exact (source, tag) receives and messages.
    pub(super) exact: HashMap<(u32, i32), Bin>,
    /// Any-source receives of a tag; every unexpected message of the tag.
    pub(super) by_tag: HashMap<i32, Bin>,
    /// Any-source any-tag receives; every unexpected message.
    pub(super) any: Bin,
    /// Receives queued in `by_tag` (none: an arrival skips that lookup).
    pub(super) any_source_posts: usize,
    pub(super) tally: Tally,
}

impl Bins {
    /// Whether no receive or message is listed.
    pub(super) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.by_tag.is_empty() && self.any.is_empty()
    }
}

/// One context.
#[derive(Debug)]
pub(super) struct Context<M> {
    pub(super) bins: Bins,
    pub(super) streams: HashMap<u32, Stream<M>>,
}

impl<M> Default for Context<M> {
    fn default() -> Self {
        Context {
            bins: Bins::default(),
            streams: HashMap::new(),
        }
    }
}

/// The slabs and the engine-wide counts.
pub(super) struct Store<R, M> {
    pub(super) posts: Slab<PostNode<R>>,
    pub(super) msgs: Slab<MsgNode<M>>,
    pub(super) tally: Tally,
}

/// The earliest-arrived unexpected message of `ctx` that `spec` matches.
pub(super) fn first_unexpected<M>(ctx: &Context<M>, spec: RecvSpec) -> Option<usize> {
    match (spec.source, spec.tag) {
        (Source::Rank(s), Tag::Tag(t)) => ctx.bins.exact.get(&(s, t))?.unexpected.head(),
        (Source::Any, Tag::Tag(t)) => ctx.bins.by_tag.get(&t)?.unexpected.head(),
        (Source::Rank(s), Tag::Any) => ctx.streams.get(&s)?.bin.unexpected.head(),
        (Source::Any, Tag::Any) => ctx.bins.any.unexpected.head(),
    }
}

/// Removes unexpected message `idx` of `ctx`.
pub(super) fn remove_unexpected<R, M>(
    ctx: &mut Context<M>,
    store: &mut Store<R, M>,
    idx: usize,
) -> Option<Message<M>> {
    let source = store.msgs.get(idx)?.env.source;
    let stream = ctx.streams.get_mut(&source)?;
    remove_msg(&mut ctx.bins, &mut stream.bin, store, idx)
}

/// Removes unexpected message `idx` from its four lists and the slab;
/// `source_bin` is its source's.
pub(super) fn remove_msg<R, M>(
    bins: &mut Bins,
    source_bin: &mut Bin,
    store: &mut Store<R, M>,
    idx: usize,
) -> Option<Message<M>> {
    let env = store.msgs.get(idx)?.env;
    let msgs = &mut store.msgs;
    if let Entry::Occupied(mut e) = bins.exact.entry((env.source, env.tag)) {
        e.get_mut().unexpected.unlink(msgs, idx, BY_EXACT);
        if e.get().is_empty() {
            e.remove();
        }
    }
    if let Entry::Occupied(mut e) = bins.by_tag.entry(env.tag) {
        e.get_mut().unexpected.unlink(msgs, idx, BY_TAG);
        if e.get().is_empty() {
            e.remove();
        }
    }
    source_bin.unexpected.unlink(msgs, idx, BY_SOURCE);
    bins.any.unexpected.unlink(msgs, idx, BY_CONTEXT);
    let node = msgs.remove(idx)?;
    for t in [&mut store.tally, &mut bins.tally] {
        t.unexpected -= 1;
        t.unexpected_bytes -= node.bytes as u128;
    }
    Some(Message {
        envelope: node.env,
        msg: node.msg,
        bytes: node.bytes,
    })
}

/// Takes queued receive `idx` (of specification `spec`) out of its bin,
/// dropping the bin if it empties. The node stays in the slab.
pub(super) fn unlink_post<R, M>(
    ctx: &mut Context<M>,
    posts: &mut Slab<PostNode<R>>,
    idx: usize,
    spec: RecvSpec,
) {
    let bins = &mut ctx.bins;
    match (spec.source, spec.tag) {
        (Source::Rank(s), Tag::Tag(t)) => {
            if let Entry::Occupied(mut e) = bins.exact.entry((s, t)) {
                e.get_mut().posted.unlink(posts, idx, 0);
                if e.get().is_empty() {
                    e.remove();
                }
            }
        }
        (Source::Any, Tag::Tag(t)) => {
            if let Entry::Occupied(mut e) = bins.by_tag.entry(t) {
                e.get_mut().posted.unlink(posts, idx, 0);
                bins.any_source_posts -= 1;
                if e.get().is_empty() {
                    e.remove();
                }
            }
        }
        (Source::Rank(s), Tag::Any) => {
            if let Some(stream) = ctx.streams.get_mut(&s) {
                stream.bin.posted.unlink(posts, idx, 0);
            }
        }
        (Source::Any, Tag::Any) => bins.any.posted.unlink(posts, idx, 0),
    }
}

/// Where the earliest matching receive of an arrival is queued.
#[derive(Clone, Copy)]
enum Which {
    Exact,
    ByTag,
    BySource,
    Any,
}

/// Matches an in-order message with the earliest-posted receive that
/// accepts it, or stores it as unexpected. `source_bin` is the bin of the
/// message's stream.
pub(super) fn deliver<R, M>(
    bins: &mut Bins,
    source_bin: &mut Bin,
    store: &mut Store<R, M>,
    env: Envelope,
    msg: M,
    bytes: usize,
    keep: impl FnOnce(M) -> M,
) -> Event<R, M> {
    let key = (env.source, env.tag);
    let posts = &store.posts;
    let stamp_of = |head: Option<usize>| head.and_then(|i| posts.get(i).map(|n| (n.stamp, i)));
    let mut best: Option<(u64, usize, Which)> = None;
    let mut consider = |cand: Option<(u64, usize)>, which| {
        if let Some((stamp, idx)) = cand {
            if best.is_none_or(|(b, _, _)| stamp < b) {
                best = Some((stamp, idx, which));
            }
        }
    };
    consider(
        stamp_of(bins.exact.get(&key).and_then(|b| b.posted.head())),
        Which::Exact,
    );
    if bins.any_source_posts != 0 {
        consider(
            stamp_of(bins.by_tag.get(&env.tag).and_then(|b| b.posted.head())),
            Which::ByTag,
        );
    }
    consider(stamp_of(source_bin.posted.head()), Which::BySource);
    consider(stamp_of(bins.any.posted.head()), Which::Any);

    if let Some((_, idx, which)) = best {
        let posts = &mut store.posts;
        match which {
            Which::Exact => {
                if let Entry::Occupied(mut e) = bins.exact.entry(key) {
                    e.get_mut().posted.unlink(posts, idx, 0);
                    if e.get().is_empty() {
                        e.remove();
                    }
                }
            }
            Which::ByTag => {
                if let Entry::Occupied(mut e) = bins.by_tag.entry(env.tag) {
                    e.get_mut().posted.unlink(posts, idx, 0);
                    bins.any_source_posts -= 1;
                    if e.get().is_empty() {
                        e.remove();
                    }
                }
            }
            Which::BySource => source_bin.posted.unlink(posts, idx, 0),
            Which::Any => bins.any.posted.unlink(posts, idx, 0),
        }
        if let Some(node) = posts.remove(idx) {
            bins.tally.posted -= 1;
            store.tally.posted -= 1;
            return Event::Matched {
                post: PostId {
                    idx,
                    stamp: node.stamp,
                },
                req: node.req,
                message: Message {
                    envelope: env,
                    msg,
                    bytes,
                },
            };
        }
    }

    let msgs = &mut store.msgs;
    let idx = msgs.insert(MsgNode {
        env,
        bytes,
        msg: keep(msg),
        links: [Link::UNLINKED; 4],
    });
    bins.exact
        .entry(key)
        .or_default()
        .unexpected
        .push_back(msgs, idx, BY_EXACT);
    bins.by_tag
        .entry(env.tag)
        .or_default()
        .unexpected
        .push_back(msgs, idx, BY_TAG);
    source_bin.unexpected.push_back(msgs, idx, BY_SOURCE);
    bins.any.unexpected.push_back(msgs, idx, BY_CONTEXT);
    for t in [&mut store.tally, &mut bins.tally] {
        t.unexpected += 1;
        t.unexpected_bytes += bytes as u128;
    }
    Event::Stored {
        envelope: env,
        bytes,
    }
}
