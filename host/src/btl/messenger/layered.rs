//! What the library's own layers (point-to-point, one-sided) use of the
//! messenger: handlers and sends on the framework's reserved tags, RDMA
//! whose completions stay apart from the user's and from the other
//! layer's, and a count of peer failures that does not take them from the
//! user.

use fireopal_abi::btl::{MemRegion, Rank};

use super::{
    Handler, Incoming, MemoryHandle, Messenger, Replies, SendError, SendId, SendTicket,
    FIRST_RESERVED_TAG,
};

/// Whose operation a send or RDMA is: its completion goes to
/// [`Messenger::take_completions`] (the user's), to
/// [`Messenger::take_layer_completions`] (point-to-point's) or to
/// [`Messenger::take_one_sided_completions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    User,
    Layer,
    OneSided,
    /// The messenger's own sends (lane notices, replayed messages): no one
    /// takes their completions.
    Replay,
}

/// Completed operations, the user's and the layers' apart: an id's layer
/// bit says whose it is.
#[derive(Debug, Default)]
pub(super) struct Completions {
    pub(super) user: Vec<(SendId, Result<(), SendError>)>,
    pub(super) layer: Vec<(SendId, Result<(), SendError>)>,
    pub(super) one_sided: Vec<(SendId, Result<(), SendError>)>,
}

impl Completions {
    pub(super) fn push(&mut self, id: SendId, status: Result<(), SendError>) {
        if id.0 & SILENT_BIT != 0 {
            return;
        }
        if id.0 & ONE_SIDED_BIT != 0 {
            self.one_sided.push((id, status));
        } else if id.is_internal() {
            self.layer.push((id, status));
        } else {
            self.user.push((id, status));
        }
    }
}

/// The bit that marks a layer's [`SendId`]s.
const LAYER_BIT: u64 = 1 << 63;
/// With [`LAYER_BIT`], the bit that marks the one-sided layer's.
const ONE_SIDED_BIT: u64 = 1 << 62;
/// With [`LAYER_BIT`], the bit that marks the messenger's own.
const SILENT_BIT: u64 = 1 << 61;

impl SendId {
    /// Whether the id belongs to one of the library's layers.
    pub(super) fn is_internal(self) -> bool {
        self.0 & LAYER_BIT != 0
    }
}

impl Messenger {
    /// The next id of an operation of `class`.
    pub(super) fn next_id(&mut self, class: Class) -> SendId {
        let n = self.next_send;
        self.next_send += 1;
        match class {
            Class::User => SendId(n),
            Class::Layer => SendId(n | LAYER_BIT),
            Class::OneSided => SendId(n | LAYER_BIT | ONE_SIDED_BIT),
            Class::Replay => SendId(n | LAYER_BIT | SILENT_BIT),
        }
    }

    /// Installs a layer's handler on a reserved tag (below the
    /// fragmentation tags).
    pub(crate) fn register_layer(
        &mut self,
        tag: u8,
        handler: impl FnMut(&Incoming<'_>, &mut Replies) + 'static,
    ) {
        debug_assert!((FIRST_RESERVED_TAG..super::TAG_FRAG_NEXT).contains(&tag));
        let handler: Handler = Box::new(handler);
        self.set_handler(tag, handler);
    }

    /// Sends a layer's message on its reserved tag; a later completion
    /// goes to [`take_layer_completions`](Self::take_layer_completions).
    pub(crate) fn send_layer(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendTicket, SendError> {
        self.send_message(peer, tag, header, payload, Class::Layer)
    }

    /// Sends a layer's message with `sendi` alone: on the module of a
    /// route of one, or on the lanes of a sequenced route. `Ok(true)` when
    /// it left whole, `Ok(false)` when nothing was sent (a message larger
    /// than `sendi` takes, a module Busy), and
    /// [`send_layer`](Self::send_layer) sends it then. The commonest small
    /// message crosses one function to the module, not the general send's
    /// three. [`try_send_immediate`](Self::try_send_immediate) is this for
    /// the user's tags.
    #[inline]
    pub(crate) fn sendi_layer(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, SendError> {
        let route = self.live_route(peer)?;
        if route.sequenced {
            return Ok(self
                .send_sequenced(peer, tag, header, payload, None)?
                .is_some());
        }
        let i = *route
            .modules
            .first()
            .ok_or_else(|| SendError::Unreachable(peer))?;
        self.sendi_on(i, peer, tag, header, payload)
    }

    /// Sends a layer's message whose payload the transport reads where it
    /// is, after this returns, where the peer's module sends in place;
    /// otherwise (a route of several lanes, which keep copies to resend,
    /// or a module without `SEND_IN_PLACE`) like
    /// [`send_layer`](Self::send_layer). `MemRegion::new`'s contract
    /// applies: the bytes stay valid and unchanged until the ticket
    /// completes.
    #[allow(unsafe_code)]
    pub(crate) fn send_layer_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
    ) -> Result<SendTicket, SendError> {
        let route = self.live_route(peer)?;
        let single = match route.sequenced {
            false => route.modules.first().copied(),
            true => None,
        };
        if let Some(i) = single.filter(|&i| self.takes_in_place(i, header.len(), payload.len())) {
            return self.send_in_place_as(Class::Layer, i, peer, tag, header, payload);
        }
        // SAFETY: valid for reads until the send completes, by the
        // region's contract; `send_message` is done with it when it
        // returns.
        let bytes = unsafe { payload.as_bytes() };
        self.send_message(peer, tag, header, bytes, Class::Layer)
    }

    /// Sends a message of `class` on a reserved tag.
    pub(crate) fn send_class(
        &mut self,
        class: Class,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendTicket, SendError> {
        self.send_message(peer, tag, header, payload, class)
    }

    /// An RDMA operation of `class`: a put if `write`, else a get.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rdma_class(
        &mut self,
        class: Class,
        write: bool,
        peer: Rank,
        local: MemRegion,
        local_handle: Option<&MemoryHandle>,
        remote_addr: u64,
        remote_key: &[u8],
    ) -> Result<SendTicket, SendError> {
        self.rdma(
            write,
            class,
            peer,
            local,
            local_handle,
            remote_addr,
            remote_key,
        )
    }

    /// Completions of the one-sided layer's operations, each reported
    /// once.
    pub(crate) fn take_one_sided_completions(&mut self) -> Vec<(SendId, Result<(), SendError>)> {
        std::mem::take(&mut self.shared.completions.one_sided)
    }

    /// Completions of a layer's operations, each reported once.
    pub(crate) fn take_layer_completions(&mut self) -> Vec<(SendId, Result<(), SendError>)> {
        std::mem::take(&mut self.shared.completions.layer)
    }

    /// Whether a layer's completion waits to be taken.
    pub(crate) fn has_layer_completions(&self) -> bool {
        !self.shared.completions.layer.is_empty()
    }

    /// Grows by one for every peer recorded as failed.
    pub(crate) fn failure_epoch(&self) -> u64 {
        self.shared.failure_epoch
    }
}
