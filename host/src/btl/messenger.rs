//! [`Messenger`]: module setup, routes and the active-message API;
//! registrations and one-sided operations (`rdma`), transfer buffers
//! (`transfer`), registered segments (`segments`), components and
//! modules that fail (`failover`), peers that fail (`failure`), several
//! modules per peer (`lanes`) and the loss of one of them (`replay`), what modules hand back during `progress`
//! (`sink`) and the errors of setup (`init_error`) live in the
//! submodules.

use std::collections::HashMap;
use std::fmt;
use std::panic::resume_unwind;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RSlice};
use fireopal_abi::btl::{
    BtlAttributes, BtlEventSink_TO, BtlModuleBox, Completion, PeerAddress, Rank, Reachability,
    SendiOutcome,
};
use fireopal_abi::host::Host;
use fireopal_abi::param::ParamValue;
use fireopal_abi::PluginError;
use fireopal_core::regcache::GetError;
use fireopal_core::wire::am::{decode_directory, encode_directory, DirectoryEntry, FirstFragment};

use crate::bootstrap::Exchange;
use crate::plugin::{Framework, Registry};

/// Tags from here up belong to the framework.
pub const FIRST_RESERVED_TAG: u8 = 0xF0;
pub(super) const TAG_FRAG_FIRST: u8 = 0xFF;
pub(super) const TAG_FRAG_NEXT: u8 = 0xFE;
/// Bootstrap key of each process's module directory.
const DIRECTORY_KEY: &str = "btl-directory";
/// How often (in `progress` calls) a module with no routed peer and
/// nothing handed to it is polled anyway.
const IDLE_POLL_EVERY: u64 = 64;
/// Largest message a peer may announce (fragmented messages allocate it).
const MAX_MESSAGE: u64 = 1 << 32;

/// A received active message, valid during the handler call only.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// Sender's rank.
    pub peer: Rank,
    /// Tag it was sent with.
    pub tag: u8,
    /// Header bytes.
    pub header: &'a [u8],
    /// Payload bytes.
    pub payload: &'a [u8],
}

type Handler = Box<dyn FnMut(&Incoming<'_>, &mut Replies)>;

/// Identifies a send whose completion comes later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub u64);

/// What [`Messenger::send`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendTicket {
    /// The message left (or was copied by the module); nothing follows.
    Done,
    /// The module finishes it later; [`Messenger::take_completions`]
    /// reports it exactly once.
    Pending(SendId),
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No rank of that number.
    NoSuchPeer(Rank),
    /// No module reaches the peer.
    Unreachable(Rank),
    /// The peer failed earlier.
    PeerFailed {
        /// The peer.
        peer: Rank,
        /// Why.
        failure: PeerFailure,
    },
    /// Tags from [`FIRST_RESERVED_TAG`] are the framework's.
    ReservedTag(u8),
    /// The header is longer than the module accepts.
    HeaderTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The module refused.
    Module(PluginError),
    /// The registration cache could not register the memory (the
    /// module's refusal is its source).
    Registration(GetError<PluginError>),
    /// The module was closed after its `progress` failed.
    Closed {
        /// Component name.
        component: String,
        /// The error that closed it.
        error: PluginError,
    },
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchPeer(p) => write!(f, "no rank {p} in this job"),
            Self::Unreachable(p) => write!(f, "no transport reaches rank {p}"),
            Self::PeerFailed { peer, failure } => write!(f, "rank {peer} failed: {failure}"),
            Self::ReservedTag(t) => write!(f, "tag {t:#x} is reserved for the framework"),
            Self::HeaderTooLong { len, max } => {
                write!(f, "header of {len} bytes exceeds the limit of {max}")
            }
            Self::Module(e) => write!(f, "transport error: {e}"),
            Self::Registration(e) => write!(f, "memory registration failed: {e}"),
            Self::Closed { component, error } => {
                write!(f, "btl {component} was closed after an error: {error}")
            }
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Module(e) | Self::Closed { error: e, .. } => Some(e),
            Self::PeerFailed { failure, .. } => Some(failure),
            Self::Registration(e) => Some(e),
            _ => None,
        }
    }
}

/// Why `progress` failed. [`Messenger::progress`] closes a module whose
/// own `progress` fails instead of returning this; the type keeps the
/// signature able to report errors of the messenger as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressError {
    /// A module's progress failed.
    Module {
        /// Component name.
        component: String,
        /// What it said.
        error: PluginError,
    },
}

impl fmt::Display for ProgressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Module { component, error } => write!(f, "btl {component}: {error}"),
        }
    }
}

impl std::error::Error for ProgressError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Module { error, .. } => Some(error),
        }
    }
}

/// The module chosen for a peer, for logs and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteInfo {
    /// Component name of the module used.
    pub component: String,
    /// Module index within the component.
    pub index: usize,
    /// Every module that reaches the peer, best first:
    /// `(component, index, exclusivity, latency_ns)`.
    pub candidates: Vec<(String, usize, u32, u32)>,
}

struct ModuleSlot {
    component: String,
    index: usize,
    module: BtlModuleBox,
    attrs: BtlAttributes,
    /// The chosen module for some other rank, so traffic may arrive any
    /// time.
    remote: bool,
    /// Something was handed to it since `progress` last found it idle
    /// (a module reaching only this rank has nothing to do otherwise).
    active: bool,
    /// Why it was closed: it is never called again.
    closed: Option<PluginError>,
}

#[derive(Default)]
struct Route {
    /// Modules usable for this peer, best first.
    modules: Vec<usize>,
    /// All modules reaching it, best first (for reports).
    candidates: Vec<usize>,
    /// Boxed: every send reads this route, and the cold failure record
    /// would otherwise spread it over more cache lines.
    failed: Option<Box<PeerFailure>>,
    /// Messages carry sequence numbers (the route had several modules).
    sequenced: bool,
    /// Round robin and sequence numbers over several modules; boxed, as
    /// a route of one module never reads it.
    lanes: Box<lanes::Lanes>,
}

/// Marks the route to `peer` failed, once: whether this call did.
fn mark_failed(routes: &mut [Route], epoch: &mut u64, peer: Rank, failure: PeerFailure) -> bool {
    match routes.get_mut(peer as usize) {
        Some(r) if r.failed.is_none() => {
            r.failed = Some(Box::new(failure));
            *epoch += 1;
            true
        }
        _ => false,
    }
}

/// A send split into several module operations.
struct Outstanding {
    id: SendId,
    parts_left: usize,
    error: Option<SendError>,
}

/// The active-message endpoint of one process. See the module docs.
pub struct Messenger {
    rank: Rank,
    size: u32,
    slots: Vec<ModuleSlot>,
    /// Routes, handlers, sends in flight and what else the modules'
    /// events update.
    shared: Shared,
    next_cookie: u64,
    next_send: u64,
    polls: u64,
    /// Transfer buffers handed out and not freed: (module, id).
    live_buffers: Vec<(usize, u64)>,
    /// The registration cache and the memory monitor.
    registrations: registrations::Registrations,
    /// How a message tries the immediate sends of several modules.
    sendi_policy: SendiPolicy,
    /// Smallest piece of a message striped over several modules (0: none
    /// is).
    stripe_min: usize,
    /// Most bytes of copies kept per peer for replay over other lanes.
    replay_limit: usize,
    /// The host's log, for modules that fail.
    log: Host,
}

impl fmt::Debug for Messenger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Messenger")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field(
                "modules",
                &self
                    .slots
                    .iter()
                    .map(|s| format!("{}[{}]", s.component, s.index))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Messenger {
    /// Opens every module of every selected BTL, exchanges addresses with
    /// the job through `boot` (collective: every rank must call it) and
    /// builds routes. `boot` is the job's [`Bootstrap`](crate::bootstrap::Bootstrap)
    /// or a runtime's own [`Exchange`].
    pub fn init<X: Exchange + ?Sized>(
        registry: &Registry,
        boot: &mut X,
    ) -> Result<Self, InitError> {
        let rank = boot.rank();
        let size = boot.size();
        let log = registry.host_log("btl");
        let opened = failover::open_modules(registry)?;
        let (slots, addresses) = (opened.slots, opened.addresses);
        let registrations = registrations::Registrations::new(slots.len(), registry.params())
            .map_err(InitError::Memory)?;
        let policy = registry.params().str_value("bml_sendi").unwrap_or("fast");
        let stripe_min = match registry.params().value("bml_stripe_min") {
            Some(ParamValue::Size(v) | ParamValue::UInt(v)) => {
                usize::try_from(*v).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        let replay_limit = match registry.params().value("bml_replay_size") {
            Some(ParamValue::Size(v) | ParamValue::UInt(v)) => {
                usize::try_from(*v).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        let sendi_policy = SendiPolicy::parse(policy)
            .ok_or_else(|| InitError::BadSendiPolicy(policy.to_owned()))?;
        let entries: Vec<DirectoryEntry<'_>> = slots
            .iter()
            .zip(&addresses)
            .map(|(s, a)| DirectoryEntry {
                component: &s.component,
                index: u16::try_from(s.index).unwrap_or(u16::MAX),
                address: a,
            })
            .collect();
        let directory = encode_directory(&entries).map_err(InitError::Directory)?;
        boot.put(DIRECTORY_KEY, &directory)
            .map_err(|e| InitError::Bootstrap(ExchangeError::Put(Box::new(e))))?;
        boot.fence()
            .map_err(|e| InitError::Bootstrap(ExchangeError::Fence(Box::new(e))))?;

        // For every local module, the address each peer published for the
        // same (component, index).
        let mut peer_addresses: Vec<Vec<(Rank, Vec<u8>)>> = vec![Vec::new(); slots.len()];
        let mut rank0_components = std::collections::HashSet::new();
        for peer in 0..size {
            let bytes = boot.get(peer, DIRECTORY_KEY).map_err(|error| {
                InitError::Bootstrap(ExchangeError::Get {
                    peer,
                    error: Box::new(error),
                })
            })?;
            let dir = decode_directory(&bytes)
                .map_err(|error| InitError::BadDirectory { peer, error })?;
            if peer == 0 {
                rank0_components.extend(dir.iter().map(|e| e.component.to_owned()));
            }
            for entry in dir {
                if let Some(i) = slots.iter().position(|s| {
                    s.component == entry.component && s.index == usize::from(entry.index)
                }) {
                    if let Some(list) = peer_addresses.get_mut(i) {
                        list.push((peer, entry.address.to_vec()));
                    }
                }
            }
        }

        failover::report_disabled(&log, rank, &opened.disabled, &rank0_components);

        let local: Vec<u32> = boot.local_ranks().to_vec();
        let mut reach: Vec<Vec<usize>> = vec![Vec::new(); size as usize];
        let mut slots = slots;
        for (i, (slot, peers)) in slots.iter_mut().zip(&peer_addresses).enumerate() {
            if peers.is_empty() {
                continue;
            }
            let list: Vec<PeerAddress<'_>> = peers
                .iter()
                .map(|(r, a)| PeerAddress {
                    rank: *r,
                    node_local: local.contains(r),
                    address: RSlice::from_slice(a),
                })
                .collect();
            let answers = match slot
                .module
                .add_peers(RSlice::from_slice(&list))
                .into_result()
            {
                Ok(answers) => answers,
                Err(error) if registry.is_required(Framework::Btl, &slot.component) => {
                    return Err(InitError::Module {
                        component: slot.component.clone(),
                        error,
                    })
                }
                Err(error) => {
                    failover::report_setup_failure(
                        &log,
                        slot.component.as_str(),
                        slot.index,
                        &error,
                    );
                    slot.closed = Some(error);
                    continue;
                }
            };
            for ((r, _), answer) in peers.iter().zip(answers.iter()) {
                if *answer == Reachability::Reachable {
                    if let Some(v) = reach.get_mut(*r as usize) {
                        v.push(i);
                    }
                }
            }
        }

        let routes: Vec<Route> = reach
            .into_iter()
            .map(|mut mods| {
                mods.sort_by_key(|&i| {
                    let a = &slots[i].attrs;
                    (std::cmp::Reverse(a.exclusivity), a.latency_ns)
                });
                let modules = failover::best_tier(&slots, &mods);
                Route {
                    sequenced: modules.len() > 1,
                    lanes: Box::new(lanes::Lanes::new(&modules)),
                    modules,
                    candidates: mods,
                    failed: None,
                }
            })
            .collect();

        for (peer, route) in routes.iter().enumerate() {
            if peer as u32 != rank {
                for &i in &route.modules {
                    slots[i].remote = true;
                }
            }
        }
        let mut handlers = Vec::with_capacity(256);
        handlers.resize_with(256, || None);
        let m = Self {
            rank,
            size,
            slots,
            shared: Shared {
                routes,
                handlers,
                replies: Replies::default(),
                failure_epoch: 0,
                cookies: HashMap::default(),
                outstanding: HashMap::default(),
                completions: Completions::default(),
                failures: Vec::new(),
                reassembly: HashMap::new(),
                lane_state: replay::LaneState::new(size as usize, replay_limit),
                unhandled: sink::Unhandled::default(),
            },
            next_cookie: 1,
            next_send: 1,
            polls: 0,
            live_buffers: Vec::new(),
            registrations,
            sendi_policy,
            stripe_min,
            replay_limit,
            log,
        };
        if registry.params().str_value("log_level") == Some("debug") {
            for peer in 0..size {
                match m.route(peer) {
                    Some(r) => eprintln!(
                        "fireopal[{rank}] btl: rank {peer} via {}[{}] (candidates {:?}); lanes {}",
                        r.component,
                        r.index,
                        r.candidates,
                        m.lanes(peer)
                            .iter()
                            .map(|l| format!(
                                "{}[{}] weight {} Mb/s",
                                l.component, l.index, l.bandwidth_mbps
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => eprintln!("fireopal[{rank}] btl: rank {peer} unreachable"),
                }
            }
        }
        Ok(m)
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of processes.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The module used for `peer`, and every candidate, best first.
    pub fn route(&self, peer: Rank) -> Option<RouteInfo> {
        let route = self.shared.routes.get(peer as usize)?;
        let first = *route.modules.first()?;
        let slot = self.slots.get(first)?;
        Some(RouteInfo {
            component: slot.component.clone(),
            index: slot.index,
            candidates: route
                .candidates
                .iter()
                .filter_map(|&i| self.slots.get(i))
                .map(|s| {
                    (
                        s.component.clone(),
                        s.index,
                        s.attrs.exclusivity,
                        s.attrs.latency_ns,
                    )
                })
                .collect(),
        })
    }

    /// Attributes of the module used for `peer`.
    pub fn attributes(&self, peer: Rank) -> Option<BtlAttributes> {
        let i = *self.shared.routes.get(peer as usize)?.modules.first()?;
        self.slots.get(i).map(|s| s.attrs)
    }

    /// Installs the handler of `tag`, replacing any earlier one. Tags from
    /// [`FIRST_RESERVED_TAG`] are refused.
    pub fn register(
        &mut self,
        tag: u8,
        mut handler: impl FnMut(&Incoming<'_>) + 'static,
    ) -> Result<(), SendError> {
        self.register_replying(tag, move |msg, _| handler(msg))
    }

    /// Installs a handler that may answer: what it queues on [`Replies`]
    /// is sent once the module that delivered the message has returned.
    /// Tags from [`FIRST_RESERVED_TAG`] are refused.
    pub fn register_replying(
        &mut self,
        tag: u8,
        handler: impl FnMut(&Incoming<'_>, &mut Replies) + 'static,
    ) -> Result<(), SendError> {
        if tag >= FIRST_RESERVED_TAG {
            return Err(SendError::ReservedTag(tag));
        }
        self.set_handler(tag, Box::new(handler));
        Ok(())
    }

    fn set_handler(&mut self, tag: u8, handler: Handler) {
        if let Some(h) = self.shared.handlers.get_mut(usize::from(tag)) {
            *h = Some(handler);
        }
    }

    /// The route to `peer`, refusing a peer that failed.
    #[inline]
    fn live_route(&self, peer: Rank) -> Result<&Route, SendError> {
        let route = self
            .shared
            .routes
            .get(peer as usize)
            .ok_or_else(|| SendError::NoSuchPeer(peer))?;
        match &route.failed {
            Some(failure) => Err(SendError::PeerFailed {
                peer,
                failure: PeerFailure::clone(failure),
            }),
            None => Ok(route),
        }
    }

    #[inline]
    fn module_for(&self, peer: Rank) -> Result<usize, SendError> {
        self.live_route(peer)?
            .modules
            .first()
            .copied()
            .ok_or_else(|| SendError::Unreachable(peer))
    }

    /// Marks the route to `peer` failed (once).
    fn fail_route(&mut self, peer: Rank, failure: PeerFailure) {
        mark_failed(
            &mut self.shared.routes,
            &mut self.shared.failure_epoch,
            peer,
            failure,
        );
    }

    /// Counts the parts of send `id` still to complete, and its ticket:
    /// done if none is, else pending with `error` kept for its end.
    fn await_parts(&mut self, id: SendId, parts: usize, error: Option<SendError>) -> SendTicket {
        if parts == 0 {
            return SendTicket::Done;
        }
        self.shared.outstanding.insert(
            id,
            Outstanding {
                id,
                parts_left: parts,
                error,
            },
        );
        SendTicket::Pending(id)
    }

    /// Sends an active message. Tries `sendi`, then `send`; splits messages
    /// larger than the module's `max_send_size`. The buffers may be reused
    /// as soon as this returns.
    pub fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendTicket, SendError> {
        if tag >= FIRST_RESERVED_TAG {
            return Err(SendError::ReservedTag(tag));
        }
        self.send_message(peer, tag, header, payload, Class::User)
    }

    /// Sends on module `i`, whole or in fragments.
    fn send_routed(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        self.send_routed_after(i, peer, tag, header, payload, class, false)
    }

    /// [`send_routed`](Self::send_routed), skipping the immediate send when
    /// `sendi_refused` says module `i` just answered it Busy.
    #[allow(clippy::too_many_arguments)]
    fn send_routed_after(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
        sendi_refused: bool,
    ) -> Result<SendTicket, SendError> {
        let attrs = self.slots[i].attrs;
        let max_header = attrs.max_header_size as usize;
        let total = header.len() as u64 + payload.len() as u64;
        if total <= attrs.max_send_size {
            if header.len() > max_header {
                return Err(SendError::HeaderTooLong {
                    len: header.len(),
                    max: max_header,
                });
            }
            if !sendi_refused && self.sendi_on(i, peer, tag, header, payload)? {
                return Ok(SendTicket::Done);
            }
            return self.send_queued(i, peer, tag, header, payload, class);
        }
        self.send_fragmented(i, peer, tag, header, payload, class)
    }

    /// One `send` on module `i`, completed now or later.
    fn send_queued(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        let (h, p) = (RSlice::from_slice(header), RSlice::from_slice(payload));
        self.start_tracked(i, class, |module, cookie| {
            module.send(peer, tag, h, p, cookie)
        })
    }

    /// The module for `peer`, refusing the framework's own tags.
    fn user_route(&self, peer: Rank, tag: u8) -> Result<usize, SendError> {
        if tag >= FIRST_RESERVED_TAG {
            return Err(SendError::ReservedTag(tag));
        }
        self.module_for(peer)
    }

    /// `sendi` on module `i`: `Ok(true)` when the whole message left,
    /// `Ok(false)` when nothing did (too large for `sendi`, or Busy).
    #[inline]
    fn sendi_on(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, SendError> {
        let slot = &mut self.slots[i];
        slot.active = true;
        if header.len() as u64 + payload.len() as u64 > slot.attrs.max_sendi_size {
            return Ok(false);
        }
        let (h, p) = (RSlice::from_slice(header), RSlice::from_slice(payload));
        match slot.module.sendi(peer, tag, h, p).into_result() {
            Ok(SendiOutcome::Sent) => Ok(true),
            Ok(SendiOutcome::Busy) => Ok(false),
            Err(e) => Err(SendError::Module(e)),
        }
    }

    /// Starts one operation on module `i` under the next cookie, and turns
    /// the module's answer into a ticket.
    fn start_tracked(
        &mut self,
        i: usize,
        class: Class,
        start: impl FnOnce(&mut BtlModuleBox, u64) -> RResult<Completion, PluginError>,
    ) -> Result<SendTicket, SendError> {
        let cookie = self.next_cookie;
        let slot = self.slot_mut(i)?;
        slot.active = true;
        match start(&mut slot.module, cookie)
            .into_result()
            .map_err(SendError::Module)?
        {
            Completion::Done => Ok(SendTicket::Done),
            Completion::Pending => Ok(self.track_pending(cookie, i, class)),
        }
    }

    /// Calls module `i` for something that completes at once (registering,
    /// buffers).
    fn call_module<T>(
        &mut self,
        i: usize,
        call: impl FnOnce(&mut BtlModuleBox) -> RResult<T, PluginError>,
    ) -> Result<T, SendError> {
        call(&mut self.slot_mut(i)?.module)
            .into_result()
            .map_err(SendError::Module)
    }

    /// Module `i`'s slot; a handle naming no module of this messenger is
    /// answered as unreachable.
    fn slot_mut(&mut self, i: usize) -> Result<&mut ModuleSlot, SendError> {
        let rank = self.rank;
        let slot = self
            .slots
            .get_mut(i)
            .ok_or_else(|| SendError::Unreachable(rank))?;
        match &slot.closed {
            Some(error) => Err(SendError::Closed {
                component: slot.component.clone(),
                error: error.clone(),
            }),
            None => Ok(slot),
        }
    }

    /// Records a single operation module `i` will complete later under
    /// `cookie` (the next cookie, now used up).
    fn track_pending(&mut self, cookie: u64, i: usize, class: Class) -> SendTicket {
        self.next_cookie += 1;
        let id = self.next_id(class);
        self.shared.cookies.insert(cookie, (id, i));
        self.shared.outstanding.insert(
            id,
            Outstanding {
                id,
                parts_left: 1,
                error: None,
            },
        );
        SendTicket::Pending(id)
    }

    fn send_fragmented(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        self.slots[i].active = true;
        let attrs = self.slots[i].attrs;
        let max_header = attrs.max_header_size as usize;
        let first_len = FirstFragment::LEN + header.len();
        if first_len > max_header || first_len as u64 >= attrs.max_send_size {
            return Err(SendError::HeaderTooLong {
                len: header.len(),
                max: max_header.saturating_sub(FirstFragment::LEN),
            });
        }
        let mut first = FirstFragment {
            tag,
            header_len: u16::try_from(header.len()).unwrap_or(u16::MAX),
            payload_len: payload.len() as u64,
        }
        .encode()
        .to_vec();
        first.extend_from_slice(header);
        let chunk = usize::try_from(attrs.max_send_size).unwrap_or(usize::MAX);
        let first_chunk = chunk - first.len();
        let id = self.next_id(class);
        let mut parts = 0usize;
        let mut offset = 0usize;
        let mut result = Ok(());
        while offset < payload.len() || offset == 0 {
            let (tag_now, hdr, room): (u8, &[u8], usize) = if offset == 0 {
                (TAG_FRAG_FIRST, &first, first_chunk)
            } else {
                (TAG_FRAG_NEXT, &[], chunk)
            };
            let end = payload.len().min(offset + room);
            let part = &payload[offset..end];
            let cookie = self.next_cookie;
            let slot = &mut self.slots[i];
            match slot
                .module
                .send(
                    peer,
                    tag_now,
                    RSlice::from_slice(hdr),
                    RSlice::from_slice(part),
                    cookie,
                )
                .into_result()
            {
                Ok(Completion::Done) => {}
                Ok(Completion::Pending) => {
                    self.next_cookie += 1;
                    self.shared.cookies.insert(cookie, (id, i));
                    parts += 1;
                }
                Err(e) => {
                    // The peer now holds a partial message; it is unusable.
                    self.fail_route(peer, PeerFailure::FragmentedSend(e.clone()));
                    result = Err(SendError::Module(e));
                    break;
                }
            }
            offset = end;
            if offset >= payload.len() {
                break;
            }
        }
        let ticket = self.await_parts(id, parts, result.clone().err());
        result.map(|()| ticket)
    }

    /// Drives every module once: delivers arrived messages to their
    /// handlers and collects completions. Returns how much work the
    /// modules did: events reported plus peers' remote operations served
    /// (0 means nothing happened). A panic in a handler resumes here,
    /// after the module's call returned.
    ///
    /// A module whose `progress` fails (or panics) is closed instead: it
    /// is never called again, its pending operations complete with the
    /// error, and its peers are routed over the next module that reaches
    /// them; a peer no other module reaches fails ([`take_failures`]).
    /// The error is logged, and an `Err` is no longer returned for it.
    ///
    /// [`take_failures`]: Self::take_failures
    #[inline]
    pub fn progress(&mut self) -> Result<usize, ProgressError> {
        self.polls = self.polls.wrapping_add(1);
        self.watch_memory();
        let mut events = 0;
        let mut failed = Vec::new();
        // One sink for every module of this poll: only its module changes.
        let mut sink = self.shared.sink(0);
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.closed.is_some() {
                continue;
            }
            // Modules no peer is routed through are still looked at now
            // and then, in case a peer ranked differently.
            if !slot.remote && !slot.active && self.polls % IDLE_POLL_EVERY != 0 {
                continue;
            }
            sink.module = i;
            let result = slot
                .module
                .progress(BtlEventSink_TO::from_ptr(&mut sink, TD_Opaque));
            if let Some(payload) = sink.panic.take() {
                resume_unwind(payload);
            }
            match result {
                RResult::ROk(n) => {
                    if n == 0 {
                        slot.active = false;
                    }
                    events += n as usize
                }
                RResult::RErr(error) => failed.push((i, error)),
            }
        }
        if !failed.is_empty() {
            for (i, error) in failed {
                self.close_module(i, error);
            }
        }
        if !self.shared.lane_state.events.is_empty() {
            self.lane_events();
        }
        if !self.shared.replies.is_empty() {
            self.send_replies();
        }
        if self.shared.unhandled.due() {
            self.report_unhandled();
        }
        Ok(events)
    }

    /// Completions of sends that answered [`SendTicket::Pending`], each
    /// reported once, and of handlers' replies that failed or completed
    /// later.
    pub fn take_completions(&mut self) -> Vec<(SendId, Result<(), SendError>)> {
        std::mem::take(&mut self.shared.completions.user)
    }

    /// Number of sends not yet complete.
    pub fn pending_sends(&self) -> usize {
        self.shared.outstanding.len()
    }

    /// Messages dropped on arrival because no handler was installed for
    /// their tag (each batch is also logged as a warning).
    pub fn unhandled_messages(&self) -> u64 {
        self.shared.unhandled.count
    }

    /// Bytes the modules have taken and not yet sent, among them those no
    /// completion is owed for (see
    /// [`Transport::unsent`](fireopal_abi::btl::Transport::unsent)).
    pub fn unsent(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.closed.is_none())
            // A module that fails here fails its next `progress` too,
            // and is closed there with its queue.
            .map(|s| s.module.unsent().into_result().unwrap_or(0))
            .sum()
    }

    /// Whether everything sent has left: no send pending, no handler's
    /// reply waiting, no byte held in a module. What a process waits for
    /// before closing its transports; progress leads there.
    pub fn drained(&self) -> bool {
        self.pending_sends() == 0 && self.shared.replies.is_empty() && self.unsent() == 0
    }

    /// Peers reported failed since the last call, each with why, once.
    pub fn take_failures(&mut self) -> Vec<(Rank, PeerFailure)> {
        std::mem::take(&mut self.shared.failures)
    }

    /// Why `peer` failed, if it did.
    pub fn peer_failed(&self, peer: Rank) -> Option<&PeerFailure> {
        self.shared.routes.get(peer as usize)?.failed.as_deref()
    }
}

mod exposed;
mod failover;
mod failure;
mod init_error;
mod lanes;
mod layered;
mod rdma;
mod registrations;
mod replay;
mod replies;
mod segments;
mod sink;
mod transfer;
mod wait;

pub(crate) use layered::Class;
use layered::Completions;
pub use replies::Replies;
use sink::{complete_part, Shared};
pub use wait::{StallWatch, WaitError};

pub use exposed::RemoteMap;
pub use failure::{FailureKind, PeerFailure};
pub use init_error::{ExchangeError, ExchangeFailure, InitError};
pub use lanes::{LaneInfo, SendiPolicy};
pub use registrations::MemoryHandle;
pub use segments::SegmentHandle;
pub use transfer::TransferBufferHandle;
