//! Exporting a component, and the panic firewall at every entry point.
//!
//! abi_stable aborts the process when a panic reaches an `extern "C"`
//! boundary, so nothing a plugin author writes is called except through
//! [`catch_panic`]. A panic inside a module method also poisons the module:
//! its state may be half-updated, so every later call answers
//! [`ErrorKind::POISONED`] instead of running on broken state.
//!
//! The host uses the same adapters for its built-in components, so
//! built-in and plugin modules are the same kind of object.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, RResult, RSlice, RStr, RString, RVec};

use crate::btl::{
    Access, BtlAttributes, BtlComponent, BtlComponentImpl, BtlComponentRef, BtlEventSinkRef,
    BtlModule, BtlModuleBox, BtlModule_TO, Completion, EventSink, MemRegion, PeerAddress, Rank,
    RdmaOp, Reachability, Registration, RemoteMapping, SendiOutcome, TransferBuffer, Transport,
};
use crate::host::{Host, HostServicesArc};
use crate::memheap::{
    Allocator, MemheapComponent, MemheapComponentImpl, MemheapComponentRef, MemheapModule,
    MemheapModuleBox, MemheapModule_TO, MemheapStats, Segment,
};
use crate::param::{ParamRegistrar, ParamRegistryRef};
use crate::{Availability, ErrorKind, PluginError};

/// Text of a panic payload.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

/// Runs `f`, turning a panic into a [`ErrorKind::PANICKED`] error.
pub fn catch_panic<R>(f: impl FnOnce() -> Result<R, PluginError>) -> RResult<R, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.into(),
        Err(payload) => RErr(PluginError::new(
            ErrorKind::PANICKED,
            panic_message(payload.as_ref()),
        )),
    }
}

/// Poison state of one module: whether a panic broke it, and the panic's
/// message. The flag is what every call checks (a message or a poll
/// crosses here), the message only read once broken.
#[derive(Debug, Default)]
struct Poison {
    broken: Cell<bool>,
    message: RefCell<String>,
}

impl Poison {
    /// Runs `f` unless poisoned; a panic poisons.
    #[inline]
    fn run<R>(&self, f: impl FnOnce() -> Result<R, PluginError>) -> RResult<R, PluginError> {
        if self.broken.get() {
            return RErr(self.refusal());
        }
        // The value goes straight into the answer: every message and every
        // poll crosses here, and the errors are rare.
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(value)) => ROk(value),
            Ok(Err(e)) => RErr(self.noting(e)),
            Err(payload) => RErr(self.noting(PluginError::new(
                ErrorKind::PANICKED,
                panic_message(payload.as_ref()),
            ))),
        }
    }

    /// `e`, after poisoning the module if it reports a panic.
    #[cold]
    fn noting(&self, e: PluginError) -> PluginError {
        if e.kind == ErrorKind::PANICKED {
            *self.message.borrow_mut() = e.message.to_string();
            self.broken.set(true);
        }
        e
    }

    /// The error of a call to a broken module.
    #[cold]
    fn refusal(&self) -> PluginError {
        PluginError::new(
            ErrorKind::POISONED,
            format!(
                "module unusable after an earlier panic: {}",
                self.message.borrow()
            ),
        )
    }
}

/// Wraps a [`Transport`] into the FFI trait, behind the panic firewall.
#[derive(Debug)]
struct TransportAdapter<T> {
    inner: T,
    poison: Poison,
}

/// The host's event sink seen through the plain [`EventSink`] trait.
struct SinkAdapter<'s, 'a>(&'s mut BtlEventSinkRef<'a>);

impl EventSink for SinkAdapter<'_, '_> {
    fn deliver(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        self.0.deliver(
            peer,
            tag,
            RSlice::from_slice(header),
            RSlice::from_slice(payload),
        );
    }
    fn send_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.0.send_complete(cookie, status.into());
    }
    fn rdma_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.0.rdma_complete(cookie, status.into());
    }
    fn peer_failed(&mut self, peer: Rank, error: PluginError) {
        self.0.peer_failed(peer, error);
    }
}

impl<T: Transport> BtlModule for TransportAdapter<T> {
    fn attributes(&self) -> RResult<BtlAttributes, PluginError> {
        self.poison.run(|| self.inner.attributes())
    }
    fn address(&self) -> RResult<RVec<u8>, PluginError> {
        self.poison.run(|| self.inner.address().map(RVec::from))
    }
    fn add_peers(
        &mut self,
        peers: RSlice<'_, PeerAddress<'_>>,
    ) -> RResult<RVec<Reachability>, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| {
            let answers = inner.add_peers(peers.as_slice())?;
            if answers.len() != peers.len() {
                return Err(PluginError::new(
                    ErrorKind::OTHER,
                    format!(
                        "add_peers answered {} entries for {} peers",
                        answers.len(),
                        peers.len()
                    ),
                ));
            }
            Ok(RVec::from(answers))
        })
    }
    fn remove_peer(&mut self, peer: Rank) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.remove_peer(peer))
    }
    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: RSlice<'_, u8>,
    ) -> RResult<SendiOutcome, PluginError> {
        let inner = &mut self.inner;
        self.poison
            .run(|| inner.sendi(peer, tag, header.as_slice(), payload.as_slice()))
    }
    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: RSlice<'_, u8>,
        cookie: u64,
    ) -> RResult<Completion, PluginError> {
        let inner = &mut self.inner;
        self.poison
            .run(|| inner.send(peer, tag, header.as_slice(), payload.as_slice(), cookie))
    }
    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> RResult<Registration, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.register_mem(region, access))
    }
    fn deregister_mem(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.deregister_mem(id))
    }
    fn put(&mut self, op: RdmaOp<'_>) -> RResult<Completion, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.put(&op))
    }
    fn get(&mut self, op: RdmaOp<'_>) -> RResult<Completion, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.get(&op))
    }
    fn progress(&mut self, mut sink: BtlEventSinkRef<'_>) -> RResult<u32, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| {
            let n = inner.progress(&mut SinkAdapter(&mut sink))?;
            Ok(u32::try_from(n).unwrap_or(u32::MAX))
        })
    }
    fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: MemRegion,
        cookie: u64,
    ) -> RResult<Completion, PluginError> {
        let inner = &mut self.inner;
        self.poison
            .run(|| inner.send_in_place(peer, tag, header.as_slice(), payload, cookie))
    }
    fn alloc_transfer_buffer(&mut self, len: usize) -> RResult<TransferBuffer, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.alloc_transfer_buffer(len))
    }
    fn free_transfer_buffer(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.free_transfer_buffer(id))
    }
    fn register_segment(&mut self, fd: i32, region: MemRegion) -> RResult<u64, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.register_segment(fd, region))
    }
    fn unregister_segment(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.unregister_segment(id))
    }
    fn map_remote(
        &mut self,
        peer: Rank,
        remote_key: RSlice<'_, u8>,
    ) -> RResult<RemoteMapping, PluginError> {
        let inner = &mut self.inner;
        self.poison
            .run(|| inner.map_remote(peer, remote_key.as_slice()))
    }
    fn unmap_remote(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.unmap_remote(id))
    }
    fn unsent(&self) -> RResult<u64, PluginError> {
        self.poison.run(|| Ok(self.inner.unsent()))
    }
}

/// Wraps a [`Transport`] into the boxed trait object that crosses the
/// boundary, behind the panic firewall.
pub fn btl_module_box<T: Transport>(transport: T) -> BtlModuleBox {
    BtlModule_TO::from_value(
        TransportAdapter {
            inner: transport,
            poison: Poison::default(),
        },
        TD_Opaque,
    )
}

/// Wraps an [`Allocator`] into the FFI trait, behind the panic firewall.
#[derive(Debug)]
struct AllocatorAdapter<A> {
    inner: A,
    poison: Poison,
}

impl<A: Allocator> MemheapModule for AllocatorAdapter<A> {
    fn init(&mut self, segment: Segment) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.init(segment))
    }
    fn alloc(&mut self, size: u64, align: u64) -> RResult<u64, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.alloc(size, align))
    }
    fn free(&mut self, offset: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.free(offset))
    }
    fn realloc(&mut self, offset: u64, new_size: u64) -> RResult<u64, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.realloc(offset, new_size))
    }
    fn stats(&self) -> RResult<MemheapStats, PluginError> {
        self.poison.run(|| self.inner.stats())
    }
}

/// Wraps an [`Allocator`] into the boxed trait object that crosses the
/// boundary, behind the panic firewall.
pub fn memheap_module_box<A: Allocator>(allocator: A) -> MemheapModuleBox {
    MemheapModule_TO::from_value(
        AllocatorAdapter {
            inner: allocator,
            poison: Poison::default(),
        },
        TD_Opaque,
    )
}

extern "C" fn btl_register_params<C: BtlComponentImpl>(
    registry: ParamRegistryRef<'_>,
) -> RResult<(), PluginError> {
    catch_panic(|| C::register_params(&mut ParamRegistrar::new(registry)))
}

extern "C" fn btl_query<C: BtlComponentImpl>(
    host: HostServicesArc,
) -> RResult<Availability, PluginError> {
    catch_panic(|| Ok(C::query(&Host::new(host))))
}

extern "C" fn btl_open<C: BtlComponentImpl>(
    host: HostServicesArc,
) -> RResult<RVec<BtlModuleBox>, PluginError> {
    catch_panic(|| {
        C::open(Host::new(host)).map(|modules| modules.into_iter().map(btl_module_box).collect())
    })
}

/// Builds the root module of BTL component `C`; used by
/// [`crate::export_btl_component!`] and by the host for built-ins.
pub fn btl_component<C: BtlComponentImpl>() -> BtlComponentRef {
    BtlComponent {
        name: RStr::from_str(C::NAME),
        version: C::VERSION,
        register_params: btl_register_params::<C>,
        query: btl_query::<C>,
        open: btl_open::<C>,
    }
    .leak_into_prefix()
}

extern "C" fn memheap_register_params<C: MemheapComponentImpl>(
    registry: ParamRegistryRef<'_>,
) -> RResult<(), PluginError> {
    catch_panic(|| C::register_params(&mut ParamRegistrar::new(registry)))
}

extern "C" fn memheap_query<C: MemheapComponentImpl>(
    host: HostServicesArc,
) -> RResult<Availability, PluginError> {
    catch_panic(|| Ok(C::query(&Host::new(host))))
}

extern "C" fn memheap_open<C: MemheapComponentImpl>(
    host: HostServicesArc,
) -> RResult<MemheapModuleBox, PluginError> {
    catch_panic(|| C::open(Host::new(host)).map(memheap_module_box))
}

/// Builds the root module of memheap component `C`; used by
/// [`crate::export_memheap_component!`] and by the host for built-ins.
pub fn memheap_component<C: MemheapComponentImpl>() -> MemheapComponentRef {
    MemheapComponent {
        name: RStr::from_str(C::NAME),
        version: C::VERSION,
        register_params: memheap_register_params::<C>,
        query: memheap_query::<C>,
        open: memheap_open::<C>,
    }
    .leak_into_prefix()
}

/// Panic message helper for host code that catches panics itself.
pub fn describe_panic(payload: &(dyn Any + Send)) -> RString {
    RString::from(panic_message(payload))
}

/// Exports a BTL component from a plugin crate.
///
/// The crate must be a `cdylib` named so that its file can be installed
/// as `libfireopal_btl_<NAME>.so`, and must depend on `abi_stable`
/// directly (the root-module attribute names it by path).
///
/// ```
/// use fireopal_abi::btl::*;
/// use fireopal_abi::host::Host;
/// use fireopal_abi::{Availability, ComponentVersion, PluginError};
///
/// struct Null;
/// impl Transport for Null {
///     fn attributes(&self) -> Result<BtlAttributes, PluginError> {
///         Err(PluginError::unsupported("attributes"))
///     }
///     fn address(&self) -> Result<Vec<u8>, PluginError> {
///         Ok(Vec::new())
///     }
///     fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
///         Ok(peers.iter().map(|_| Reachability::Unreachable("reaches no one".into())).collect())
///     }
///     fn sendi(&mut self, _: Rank, _: u8, _: &[u8], _: &[u8]) -> Result<SendiOutcome, PluginError> {
///         Ok(SendiOutcome::Busy)
///     }
///     fn send(&mut self, _: Rank, _: u8, _: &[u8], _: &[u8], _: u64) -> Result<Completion, PluginError> {
///         Err(PluginError::unsupported("send"))
///     }
///     fn progress(&mut self, _: &mut dyn EventSink) -> Result<usize, PluginError> {
///         Ok(0)
///     }
/// }
///
/// struct NullComponent;
/// impl BtlComponentImpl for NullComponent {
///     const NAME: &'static str = "null";
///     const VERSION: ComponentVersion = ComponentVersion::new(1, 0, 0);
///     type Module = Null;
///     fn query(_host: &Host) -> Availability {
///         Availability::Unavailable { reason: "a null transport moves nothing".into() }
///     }
///     fn open(_host: Host) -> Result<Vec<Null>, PluginError> {
///         Ok(vec![Null])
///     }
/// }
///
/// fireopal_abi::export_btl_component!(NullComponent);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_btl_component {
    ($component:ty) => {
        /// Root-module loader of this BTL plugin.
        #[::abi_stable::export_root_module]
        pub fn fireopal_btl_root_module() -> $crate::btl::BtlComponentRef {
            $crate::export::btl_component::<$component>()
        }
    };
}

/// Exports a memheap component from a plugin crate; see
/// [`export_btl_component!`] for the requirements.
#[macro_export]
macro_rules! export_memheap_component {
    ($component:ty) => {
        /// Root-module loader of this memheap plugin.
        #[::abi_stable::export_root_module]
        pub fn fireopal_memheap_root_module() -> $crate::memheap::MemheapComponentRef {
            $crate::export::memheap_component::<$component>()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btl::BtlFlags;

    struct Fragile {
        sends: usize,
    }

    impl Transport for Fragile {
        fn attributes(&self) -> Result<BtlAttributes, PluginError> {
            Ok(BtlAttributes {
                max_sendi_size: 8,
                eager_limit: 8,
                max_send_size: 8,
                max_header_size: 8,
                rdma_pipeline_send_length: 0,
                rdma_pipeline_frag_size: 0,
                min_rdma_pipeline_size: 0,
                exclusivity: 0,
                latency_ns: 0,
                bandwidth_mbps: 0,
                flags: BtlFlags::SEND,
                registration_handle_size: 0,
            })
        }
        fn address(&self) -> Result<Vec<u8>, PluginError> {
            Ok(Vec::new())
        }
        fn add_peers(&mut self, _: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
            // Wrong length on purpose: the adapter must refuse it.
            Ok(Vec::new())
        }
        fn sendi(
            &mut self,
            _: Rank,
            _: u8,
            _: &[u8],
            p: &[u8],
        ) -> Result<SendiOutcome, PluginError> {
            self.sends += 1;
            if p == b"boom" {
                panic!("sendi blew up");
            }
            Ok(SendiOutcome::Sent)
        }
        fn send(
            &mut self,
            _: Rank,
            _: u8,
            _: &[u8],
            _: &[u8],
            _: u64,
        ) -> Result<Completion, PluginError> {
            Ok(Completion::Done)
        }
        fn progress(&mut self, _: &mut dyn EventSink) -> Result<usize, PluginError> {
            Ok(0)
        }
    }

    #[test]
    fn a_panic_becomes_an_error_and_poisons_the_module() {
        let mut m = btl_module_box(Fragile { sends: 0 });
        let h = RSlice::from_slice(b"");
        assert!(m.sendi(0, 1, h, RSlice::from_slice(b"ok")).is_ok());
        let e = m
            .sendi(0, 1, h, RSlice::from_slice(b"boom"))
            .into_result()
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::PANICKED);
        assert_eq!(e.message.as_str(), "sendi blew up");
        let e = m.attributes().into_result().unwrap_err();
        assert_eq!(e.kind, ErrorKind::POISONED);
        assert!(e.message.contains("sendi blew up"));
    }

    #[test]
    fn add_peers_must_answer_every_peer() {
        let mut m = btl_module_box(Fragile { sends: 0 });
        let peers = [PeerAddress {
            rank: 3,
            node_local: false,
            address: RSlice::from_slice(b""),
        }];
        let e = m
            .add_peers(RSlice::from_slice(&peers))
            .into_result()
            .unwrap_err();
        assert!(e.message.contains("0 entries for 1 peers"), "{e}");
    }

    #[test]
    fn catch_panic_keeps_string_payloads() {
        let r: RResult<(), PluginError> = catch_panic(|| panic!("{} {}", "formatted", 7));
        assert_eq!(r.into_result().unwrap_err().message.as_str(), "formatted 7");
    }
}
