//! The `self` BTL: messages and RDMA to one's own rank.
//!
//! A send copies header and payload into a receive queue that `progress`
//! drains, so handlers still run from `progress` (never re-entrantly from
//! inside `send`) and order is kept. `put`/`get` are one memory copy
//! between two registered ranges of this process.

// put/get copy between raw registered ranges.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};

use fireopal_abi::btl::{
    exclusivity, Access, BtlAttributes, BtlComponentImpl, BtlFlags, Completion, EventSink,
    MemRegion, PeerAddress, Rank, RdmaOp, Reachability, Registration, SendiOutcome, Transport,
};
use fireopal_abi::host::Host;
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::{Availability, ComponentVersion, ErrorKind, PluginError};

const MAX_SEND_PARAM: &str = "btl_self_max_send_size";
const DEFAULT_MAX_SEND: u64 = 64 << 20;
const MAX_HEADER: u32 = 256;

/// The `self` component.
#[derive(Debug)]
pub struct SelfComponent;

impl BtlComponentImpl for SelfComponent {
    const NAME: &'static str = "self";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = SelfTransport;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        registry.register(
            MAX_SEND_PARAM,
            ParamValue::Size(DEFAULT_MAX_SEND),
            "largest header + payload the self transport takes in one send",
        )
    }

    fn query(_host: &Host) -> Availability {
        // A process can always reach itself.
        Availability::Available { priority: 100 }
    }

    fn open(host: Host) -> Result<Vec<SelfTransport>, PluginError> {
        let max_send = host.param_u64(MAX_SEND_PARAM).unwrap_or(DEFAULT_MAX_SEND);
        if max_send < u64::from(MAX_HEADER) {
            return Err(PluginError::invalid(format!(
                "{MAX_SEND_PARAM} must be at least {MAX_HEADER} bytes"
            )));
        }
        Ok(vec![SelfTransport {
            rank: host.job().rank,
            max_send,
            queue: VecDeque::new(),
            spare: Vec::new(),
            registrations: BTreeMap::new(),
            next_registration: 1,
        }])
    }
}

/// A queued message: header and payload in one buffer.
#[derive(Debug)]
struct Fragment {
    tag: u8,
    header_len: usize,
    bytes: Vec<u8>,
}

/// Buffers kept for reuse: allocating (and for large messages, mapping
/// and faulting in) a fresh buffer per message would dominate the cost.
const SPARE_BUFFERS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Region {
    region: MemRegion,
    access: Access,
}

/// The `self` module.
#[derive(Debug)]
pub struct SelfTransport {
    rank: Rank,
    max_send: u64,
    queue: VecDeque<Fragment>,
    spare: Vec<Vec<u8>>,
    registrations: BTreeMap<u64, Region>,
    next_registration: u64,
}

impl SelfTransport {
    fn check_peer(&self, peer: Rank) -> Result<(), PluginError> {
        if peer == self.rank {
            Ok(())
        } else {
            Err(PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("self reaches only rank {}, not {peer}", self.rank),
            ))
        }
    }

    fn fits(&self, header: &[u8], payload: &[u8]) -> bool {
        header.len() <= MAX_HEADER as usize
            && (header.len() as u64).saturating_add(payload.len() as u64) <= self.max_send
    }

    fn enqueue(&mut self, tag: u8, header: &[u8], payload: &[u8]) {
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(payload);
        self.queue.push_back(Fragment {
            tag,
            header_len: header.len(),
            bytes,
        });
    }

    /// The registration behind a remote key, and the checked range
    /// `[addr, addr + len)` inside it.
    fn remote_range(&self, op: &RdmaOp<'_>, need: Access) -> Result<*mut u8, PluginError> {
        let key: [u8; 8] = op
            .remote_key
            .as_slice()
            .try_into()
            .map_err(|_| PluginError::invalid("remote key is not 8 bytes"))?;
        let id = u64::from_le_bytes(key);
        let reg = self
            .registrations
            .get(&id)
            .ok_or_else(|| PluginError::invalid(format!("no registration {id}")))?;
        if !reg.access.contains(need) {
            return Err(PluginError::invalid(
                "registration does not grant this access",
            ));
        }
        let start = reg.region.addr() as u64;
        let end = start + reg.region.len() as u64;
        let op_end = op
            .remote_addr
            .checked_add(op.local.len() as u64)
            .ok_or_else(|| PluginError::invalid("remote range overflows"))?;
        if op.remote_addr < start || op_end > end {
            return Err(PluginError::invalid(
                "remote range is outside the registration",
            ));
        }
        Ok(op.remote_addr as usize as *mut u8)
    }
}

impl Transport for SelfTransport {
    fn attributes(&self) -> Result<BtlAttributes, PluginError> {
        Ok(BtlAttributes {
            max_sendi_size: self.max_send,
            eager_limit: self.max_send,
            max_send_size: self.max_send,
            max_header_size: MAX_HEADER,
            rdma_pipeline_send_length: 0,
            rdma_pipeline_frag_size: u64::MAX,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::SELF,
            latency_ns: 0,
            bandwidth_mbps: 100_000,
            flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET,
            registration_handle_size: 8,
        })
    }

    fn address(&self) -> Result<Vec<u8>, PluginError> {
        Ok(self.rank.to_le_bytes().to_vec())
    }

    fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
        Ok(peers
            .iter()
            .map(|p| {
                let own = p.address.as_slice() == self.rank.to_le_bytes();
                if p.rank == self.rank && own {
                    Reachability::Reachable
                } else {
                    Reachability::Unreachable("self reaches only its own rank".into())
                }
            })
            .collect())
    }

    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendiOutcome, PluginError> {
        self.check_peer(peer)?;
        if !self.fits(header, payload) {
            return Ok(SendiOutcome::Busy);
        }
        self.enqueue(tag, header, payload);
        Ok(SendiOutcome::Sent)
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        _cookie: u64,
    ) -> Result<Completion, PluginError> {
        self.check_peer(peer)?;
        if !self.fits(header, payload) {
            return Err(PluginError::invalid(format!(
                "message of {} bytes exceeds the self transport's {} byte limit",
                header.len() + payload.len(),
                self.max_send
            )));
        }
        self.enqueue(tag, header, payload);
        Ok(Completion::Done)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, PluginError> {
        if region.is_empty() {
            return Err(PluginError::invalid("cannot register an empty region"));
        }
        let id = self.next_registration;
        self.next_registration += 1;
        self.registrations.insert(id, Region { region, access });
        Ok(Registration {
            id,
            remote_key: id.to_le_bytes().to_vec().into(),
        })
    }

    fn deregister_mem(&mut self, id: u64) -> Result<(), PluginError> {
        self.registrations
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| PluginError::invalid(format!("no registration {id}")))
    }

    fn put(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.check_peer(op.peer)?;
        let dst = self.remote_range(op, Access::REMOTE_WRITE)?;
        // SAFETY: `op.local` is valid for reads per `MemRegion::new`'s
        // contract; `dst..dst+len` lies inside a live registration, valid
        // for writes per the same contract. `copy` allows overlap.
        unsafe { std::ptr::copy(op.local.as_ptr(), dst, op.local.len()) };
        Ok(Completion::Done)
    }

    fn get(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.check_peer(op.peer)?;
        let src = self.remote_range(op, Access::REMOTE_READ)?;
        // SAFETY: as in `put`, with the roles of the ranges swapped.
        unsafe { std::ptr::copy(src, op.local.as_ptr(), op.local.len()) };
        Ok(Completion::Done)
    }

    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        // Only what is queued now: a handler that sends again is served by
        // the next call, so progress always returns.
        let n = self.queue.len();
        for _ in 0..n {
            let Some(f) = self.queue.pop_front() else {
                break;
            };
            let (header, payload) = f.bytes.split_at(f.header_len);
            sink.deliver(self.rank, f.tag, header, payload);
            if self.spare.len() < SPARE_BUFFERS {
                self.spare.push(f.bytes);
            }
        }
        Ok(n)
    }
}
