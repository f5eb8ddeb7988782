//! The state behind the matching engine: receive and message nodes, the
//! per-stream sequence numbers, contexts and the bins they group, and the
//! operations that move nodes between bins (matching an arrival, removing
//! an unexpected message, taking a receive out).

use hashbrown::HashMap;

use super::bins::{Bin, BinMap};
use super::events::{Counts, Event, Message, PostId};
use super::list::{push_new, Link, Node, Slab};
use super::table::{Keyed, Table};
use super::{ContextId, Envelope, RecvSpec, Source, Tag};

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
    /// The sender's rank.
    pub(super) source: u32,
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

impl<M> Stream<M> {
    pub(super) fn new(source: u32) -> Self {
        Stream {
            source,
            expected: 0,
            failed: false,
            bin: Bin::default(),
            held: HashMap::new(),
        }
    }
}

impl<M> Keyed for Stream<M> {
    type Key = u32;
    fn key(&self) -> u32 {
        self.source
    }
}

/// The bins of a context other than its exact bins and its streams' (kept
/// apart so that an exact bin, a stream and these can be borrowed
/// together).
#[derive(Debug, Default)]
pub(super) struct Bins {
    /// Any-source receives of a tag; every unexpected message of the tag.
    pub(super) by_tag: BinMap<i32>,
    /// Any-source any-tag receives; every unexpected message.
    pub(super) any: Bin,
    /// Receives queued in `by_tag` (none: an arrival skips that lookup).
    pub(super) any_source_posts: usize,
    pub(super) tally: Tally,
}

/// One context.
#[derive(Debug)]
pub(super) struct Context<M> {
    pub(super) id: ContextId,
    /// Exact (source, tag) receives and messages.
    pub(super) exact: BinMap<(u32, i32)>,
    pub(super) bins: Bins,
    pub(super) streams: Table<Stream<M>>,
    /// Streams with `failed` set (none: a receive skips that lookup).
    pub(super) failed_sources: usize,
    /// The context's only queued receive, in no bin, when it was posted
    /// with nothing queued or unexpected here: the arrival that takes it
    /// (a blocking receive's, a ping-pong's) looks up no bin. Listed in
    /// its bin when another receive is posted.
    pub(super) lone: Option<usize>,
}

impl<M> Context<M> {
    pub(super) fn new(id: ContextId) -> Self {
        Context {
            id,
            exact: BinMap::default(),
            bins: Bins::default(),
            streams: Table::default(),
            failed_sources: 0,
            lone: None,
        }
    }

    /// Whether no receive or message is listed.
    pub(super) fn lists_nothing(&self) -> bool {
        self.lone.is_none()
            && self.exact.is_empty()
            && self.bins.by_tag.is_empty()
            && self.bins.any.is_empty()
    }

    /// Lists the lone receive, if there is one, in its bin: the context
    /// is about to have another.
    #[inline]
    pub(super) fn list_lone<R>(&mut self, posts: &mut Slab<PostNode<R>>) {
        let Some(idx) = self.lone.take() else { return };
        let Some(spec) = posts.get(idx).map(|n| n.spec) else {
            return;
        };
        let list = match (spec.source, spec.tag) {
            (Source::Rank(s), Tag::Tag(t)) => &mut self.exact.filling((s, t)).posted,
            (Source::Any, Tag::Tag(t)) => {
                self.bins.any_source_posts += 1;
                &mut self.bins.by_tag.filling(t).posted
            }
            (Source::Rank(s), Tag::Any) => {
                &mut self
                    .streams
                    .get_or_insert_with(s, || Stream::new(s))
                    .bin
                    .posted
            }
            (Source::Any, Tag::Any) => &mut self.bins.any.posted,
        };
        list.push_back(posts, idx, 0);
    }

    /// Whether receives naming `source` can no longer be queued.
    pub(super) fn source_failed(&self, source: u32) -> bool {
        self.failed_sources != 0 && self.streams.get(source).is_some_and(|s| s.failed)
    }
}

impl<M> Keyed for Context<M> {
    type Key = ContextId;
    fn key(&self) -> ContextId {
        self.id
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
        (Source::Rank(s), Tag::Tag(t)) => ctx.exact.get(&(s, t))?.unexpected.head(),
        (Source::Any, Tag::Tag(t)) => ctx.bins.by_tag.get(&t)?.unexpected.head(),
        (Source::Rank(s), Tag::Any) => ctx.streams.get(s)?.bin.unexpected.head(),
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
    let stream = ctx.streams.get_mut(source)?;
    remove_msg(&mut ctx.exact, &mut ctx.bins, &mut stream.bin, store, idx)
}

/// Removes unexpected message `idx` from its four lists and the slab;
/// `source_bin` is its source's.
pub(super) fn remove_msg<R, M>(
    exact: &mut BinMap<(u32, i32)>,
    bins: &mut Bins,
    source_bin: &mut Bin,
    store: &mut Store<R, M>,
    idx: usize,
) -> Option<Message<M>> {
    let env = store.msgs.get(idx)?.env;
    let exact_bin = exact.map.get_mut(&(env.source, env.tag))?;
    let message = remove_listed(exact_bin, bins, source_bin, store, idx);
    if exact_bin.is_empty() {
        exact.emptied(1);
    }
    message
}

/// Removes unexpected message `idx` from its four lists and the slab;
/// `exact_bin` and `source_bin` are its exact and source bins, and the
/// caller counts the exact bin if it empties.
pub(super) fn remove_listed<R, M>(
    exact_bin: &mut Bin,
    bins: &mut Bins,
    source_bin: &mut Bin,
    store: &mut Store<R, M>,
    idx: usize,
) -> Option<Message<M>> {
    let msgs = &mut store.msgs;
    let node = msgs.remove(idx)?;
    let [by_exact, by_tag, by_source, by_context] = node.links;
    exact_bin.unexpected.detach(msgs, by_exact, BY_EXACT);
    bins.by_tag
        .take_from(&node.env.tag, |b| b.unexpected.detach(msgs, by_tag, BY_TAG));
    source_bin.unexpected.detach(msgs, by_source, BY_SOURCE);
    bins.any.unexpected.detach(msgs, by_context, BY_CONTEXT);
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

/// Takes queued receive `idx`, already removed from the slab, out of its
/// bin (or out of the lone place).
pub(super) fn detach_post<R, M>(
    ctx: &mut Context<M>,
    posts: &mut Slab<PostNode<R>>,
    idx: usize,
    node: &PostNode<R>,
) {
    if ctx.lone == Some(idx) {
        ctx.lone = None;
        return;
    }
    let bins = &mut ctx.bins;
    let [link] = node.link;
    match (node.spec.source, node.spec.tag) {
        (Source::Rank(s), Tag::Tag(t)) => {
            ctx.exact
                .take_from(&(s, t), |b| b.posted.detach(posts, link, 0));
        }
        (Source::Any, Tag::Tag(t)) => {
            if bins
                .by_tag
                .take_from(&t, |b| b.posted.detach(posts, link, 0))
            {
                bins.any_source_posts -= 1;
            }
        }
        (Source::Rank(s), Tag::Any) => {
            if let Some(stream) = ctx.streams.get_mut(s) {
                stream.bin.posted.detach(posts, link, 0);
            }
        }
        (Source::Any, Tag::Any) => bins.any.posted.detach(posts, link, 0),
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
/// message's stream. The exact bin is looked up once, for both.
#[inline]
pub(super) fn deliver<R, M>(
    exact: &mut BinMap<(u32, i32)>,
    bins: &mut Bins,
    source_bin: &mut Bin,
    lone: &mut Option<usize>,
    store: &mut Store<R, M>,
    message: Message<M>,
    keep: impl FnOnce(M) -> M,
) -> Event<R, M> {
    let Message {
        envelope: env,
        msg,
        bytes,
    } = message;
    // The context's only queued receive takes the message, or nothing
    // does: no bin to look at.
    if let Some(idx) = *lone {
        if store.posts.get(idx).is_some_and(|n| n.spec.matches(&env)) {
            if let Some(node) = store.posts.remove(idx) {
                *lone = None;
                let message = Message {
                    envelope: env,
                    msg,
                    bytes,
                };
                return took(bins, &mut store.tally, idx, node, message);
            }
        }
    }
    let key = (env.source, env.tag);
    let exact_bin = exact.map.get_mut(&key);
    let best = if lone.is_some() {
        None
    } else {
        earliest_posted(
            exact_bin.as_deref(),
            bins,
            source_bin,
            &store.posts,
            env.tag,
        )
    };
    let posts = &mut store.posts;
    if let Some((idx, which, node)) = best.and_then(|(i, w)| Some((i, w, posts.remove(i)?))) {
        let [link] = node.link;
        if detach_posted(which, exact_bin, bins, source_bin, posts, link, env.tag) {
            exact.emptied(1);
        }
        let message = Message {
            envelope: env,
            msg,
            bytes,
        };
        return took(bins, &mut store.tally, idx, node, message);
    }

    let exact_bin = match exact_bin {
        Some(bin) => {
            if bin.is_empty() {
                exact.empty -= 1;
            }
            bin
        }
        None => exact.map.entry(key).or_default(),
    };
    // In the order of the link numbers (`BY_EXACT`, ...).
    let lists = [
        &mut exact_bin.unexpected,
        &mut bins.by_tag.filling(env.tag).unexpected,
        &mut source_bin.unexpected,
        &mut bins.any.unexpected,
    ];
    push_new(&mut store.msgs, lists, |links| MsgNode {
        env,
        bytes,
        msg: keep(msg),
        links,
    });
    for t in [&mut store.tally, &mut bins.tally] {
        t.unexpected += 1;
        t.unexpected_bytes += bytes as u128;
    }
    Event::Stored {
        envelope: env,
        bytes,
    }
}

/// A queued receive taken out of its slab and bin by an arrival.
pub(super) struct Taken<R> {
    /// Its slab index.
    pub(super) idx: usize,
    /// The receive.
    pub(super) node: PostNode<R>,
    /// It was the last one in its exact bin, which the caller counts as
    /// emptied.
    pub(super) emptied_exact: bool,
}

/// Takes the earliest-posted queued receive that accepts `env` out of its
/// slab and its bin, the lone receive excepted (the caller looks at it
/// first). `exact_bin` is the bin of `env`'s source and tag, if it
/// exists; `source_bin` the bin of its stream. The tallies are the
/// caller's to count.
#[inline]
pub(super) fn take_posted<R>(
    exact_bin: Option<&mut Bin>,
    bins: &mut Bins,
    source_bin: &mut Bin,
    posts: &mut Slab<PostNode<R>>,
    env: &Envelope,
) -> Option<Taken<R>> {
    let (idx, which) = earliest_posted(exact_bin.as_deref(), bins, source_bin, posts, env.tag)?;
    let node = posts.remove(idx)?;
    let [link] = node.link;
    let emptied_exact = detach_posted(which, exact_bin, bins, source_bin, posts, link, env.tag);
    Some(Taken {
        idx,
        node,
        emptied_exact,
    })
}

/// The slab index of the earliest-posted queued receive that a message
/// of tag `tag` can take, and the bin it waits in: the heads of the four
/// bins it may be in, compared by post stamp (`exact_bin` and
/// `source_bin` are the message's own).
#[inline(always)]
fn earliest_posted<R>(
    exact_bin: Option<&Bin>,
    bins: &Bins,
    source_bin: &Bin,
    posts: &Slab<PostNode<R>>,
    tag: i32,
) -> Option<(usize, Which)> {
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
        stamp_of(exact_bin.and_then(|b| b.posted.head())),
        Which::Exact,
    );
    if bins.any_source_posts != 0 {
        consider(
            stamp_of(bins.by_tag.get(&tag).and_then(|b| b.posted.head())),
            Which::ByTag,
        );
    }
    consider(stamp_of(source_bin.posted.head()), Which::BySource);
    consider(stamp_of(bins.any.posted.head()), Which::Any);
    best.map(|(_, idx, which)| (idx, which))
}

/// Unlinks a receive taken out of the slab (its `link`) from the bin
/// [`earliest_posted`] found it in; true when that was its exact bin and
/// the bin is now empty (the caller counts it emptied).
#[inline(always)]
fn detach_posted<R>(
    which: Which,
    exact_bin: Option<&mut Bin>,
    bins: &mut Bins,
    source_bin: &mut Bin,
    posts: &mut Slab<PostNode<R>>,
    link: Link,
    tag: i32,
) -> bool {
    match which {
        Which::Exact => {
            if let Some(bin) = exact_bin {
                bin.posted.detach(posts, link, 0);
                return bin.is_empty();
            }
        }
        Which::ByTag => {
            if bins
                .by_tag
                .take_from(&tag, |b| b.posted.detach(posts, link, 0))
            {
                bins.any_source_posts -= 1;
            }
        }
        Which::BySource => source_bin.posted.detach(posts, link, 0),
        Which::Any => bins.any.posted.detach(posts, link, 0),
    }
    false
}

/// The event of queued receive `idx` (`node`, out of its slab and bin)
/// taking `message`, counted out of the context's and the engine's
/// tallies.
#[inline]
fn took<R, M>(
    bins: &mut Bins,
    tally: &mut Tally,
    idx: usize,
    node: PostNode<R>,
    message: Message<M>,
) -> Event<R, M> {
    bins.tally.posted -= 1;
    tally.posted -= 1;
    Event::Matched {
        post: PostId {
            idx,
            stamp: node.stamp,
        },
        req: node.req,
        message,
    }
}
