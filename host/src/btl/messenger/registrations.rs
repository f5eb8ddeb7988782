//! The messenger's memory registrations: one registration cache shared by
//! every module, fed by the memory monitor, and the handles given to users.
//!
//! Each module is a transport of the cache, so one lookup structure serves
//! every module that reaches a peer, each with its own registrations. A
//! miss registers through the module (borrowed for the call, through
//! [`RegCache::get_with`]); the cache's deregistrations are queued and
//! carried out by the messenger right after the cache call that made them,
//! so the module is only ever called from the messenger's thread.
//!
//! Leave-pinned: a released registration stays cached (up to the
//! `rcache_max_*` limits) when the monitor watches its memory, or when
//! `rcache_leave_pinned=always` says the runtime reports unmappings itself;
//! otherwise it is deregistered at its release. Before every lookup and
//! every `progress` the monitor's reports are applied, so a buffer
//! unmapped before the call is never served its old registration.
//!
//! Memory used only locally on a module that needs no local registration
//! (everything but verbs-like transports) is not registered at all: the
//! handle names no registration, and the cache is not looked at.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use abi_stable::std_types::RResult;
use fireopal_abi::btl::{Access, BtlFlags, MemRegion, Rank};
use fireopal_abi::PluginError;
use fireopal_core::regcache::{
    self, CacheStats, RegCache, RegCacheConfig, Region, Registration, RegistrationBackend,
    TransportId,
};

use fireopal_core::wire::am::{encode_lane_keys, DirectoryEntry};
use fireopal_core::wire::p2p::MAX_KEY_LEN;

use super::{Messenger, SendError};
use crate::memory::{LeavePinned, Monitor, MonitorReport, Subscription, Userfaultfd};
use crate::param::ParamStore;

/// What a module registration leaves in the cache.
#[derive(Debug)]
pub(super) struct ModuleRegistration {
    id: u64,
    pub(super) remote_key: Vec<u8>,
    /// The monitor watches its memory.
    watched: bool,
}

/// Module deregistrations the cache asked for, carried out by the
/// messenger: `(module, registration id)`.
#[derive(Debug, Default)]
struct Released {
    queued: AtomicBool,
    list: Mutex<Vec<(usize, u64)>>,
}

/// One module as a transport of the cache.
#[derive(Debug)]
pub(super) struct ModuleRegistrar {
    module: usize,
    released: Arc<Released>,
}

impl RegistrationBackend for ModuleRegistrar {
    type Handle = ModuleRegistration;
    type Error = PluginError;

    /// Misses register through [`RegCache::get_with`], with the module
    /// borrowed from the messenger; this path is not used.
    fn register(
        &self,
        _region: Region,
        _access: regcache::Access,
    ) -> Result<Self::Handle, PluginError> {
        Err(PluginError::unsupported(
            "registration outside the messenger",
        ))
    }

    fn deregister(&self, _region: Region, handle: &Self::Handle) {
        let mut list = self
            .released
            .list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.push((self.module, handle.id));
        self.released.queued.store(true, Ordering::Release);
    }
}

/// A memory registration made through [`Messenger::register_memory`]; give
/// it back with [`Messenger::deregister_memory`]. Dropping it releases its
/// reference too, but leaves a deregistration it causes to the messenger's
/// next call.
#[derive(Debug)]
pub struct MemoryHandle {
    pub(super) held: Held,
}

#[derive(Debug)]
pub(super) enum Held {
    /// A registration of the cache.
    Cached(Registration<ModuleRegistrar>),
    /// Registrations on each lane of a route of several modules, and the
    /// remote key naming them all (`core::wire::am::encode_lane_keys`);
    /// `exposed` when they are memory exposed to every peer
    /// ([`Messenger::expose_memory`]), which the cache's limits leave out.
    Lanes {
        regs: Vec<(usize, Registration<ModuleRegistrar>)>,
        key: Vec<u8>,
        exposed: bool,
    },
    /// Local memory on a module that needs no registration for it.
    Unregistered,
}

impl MemoryHandle {
    /// Packed key a peer passes to [`Messenger::put`] / [`Messenger::get`]
    /// (empty for memory registered for local use only).
    pub fn remote_key(&self) -> &[u8] {
        match &self.held {
            Held::Cached(reg) => &reg.handle().remote_key,
            Held::Lanes { key, .. } => key,
            Held::Unregistered => &[],
        }
    }

    /// The module's id of the registration, as put into an RDMA operation.
    pub(super) fn module_id(&self) -> u64 {
        match &self.held {
            Held::Cached(reg) => reg.handle().id,
            Held::Lanes { regs, .. } => regs.first().map_or(u64::MAX, |(_, r)| r.handle().id),
            Held::Unregistered => u64::MAX,
        }
    }

    /// Module `module`'s id of the registration (`u64::MAX`: none there).
    pub(super) fn id_on(&self, module: usize) -> u64 {
        match &self.held {
            Held::Lanes { regs, .. } => regs
                .iter()
                .find(|(m, _)| *m == module)
                .map_or(u64::MAX, |(_, r)| r.handle().id),
            _ => self.module_id(),
        }
    }

    /// The first registration behind the handle.
    fn first(&self) -> Option<&Registration<ModuleRegistrar>> {
        match &self.held {
            Held::Cached(reg) => Some(reg),
            Held::Lanes { regs, .. } => regs.first().map(|(_, r)| r),
            Held::Unregistered => None,
        }
    }

    /// The pages registered (the requested range rounded out to pages,
    /// possibly merged with neighbours); `None` for local memory that
    /// needed no registration.
    pub fn registered_region(&self) -> Option<(usize, usize)> {
        self.first()
            .map(|reg| (reg.region().base(), reg.region().len()))
    }

    /// Unique id of the cache entry behind this handle: the same for two
    /// handles served by one registration.
    pub fn cache_id(&self) -> Option<u64> {
        self.first().map(Registration::id)
    }
}

/// The messenger's registration state.
pub(super) struct Registrations {
    cache: RegCache<ModuleRegistrar>,
    /// `rcache_max_count` and `rcache_max_bytes`.
    limits: (usize, usize),
    /// Registrations and bytes of exposed memory: held as long as the
    /// runtime, they are added to the limits, so that they do not crowd
    /// the buffers the cache keeps for reuse out of it.
    exposed: (usize, usize),
    /// The cache's transport of each module.
    transports: Vec<TransportId>,
    released: Arc<Released>,
    userfaultfd: Option<(&'static Userfaultfd, Subscription)>,
    report: MonitorReport,
}

impl Registrations {
    /// Counts `regs` into the exposed memory (`add`) or out of it, and
    /// sets the cache's limits to the parameters' plus that memory.
    pub(super) fn exposed_change(
        &mut self,
        regs: &[(usize, Registration<ModuleRegistrar>)],
        add: bool,
    ) {
        let bytes: usize = regs.iter().map(|(_, r)| r.region().len()).sum();
        let (count, held) = self.exposed;
        self.exposed = if add {
            (count.saturating_add(regs.len()), held.saturating_add(bytes))
        } else {
            (count.saturating_sub(regs.len()), held.saturating_sub(bytes))
        };
        self.cache.set_limits(
            self.limits.0.saturating_add(self.exposed.0),
            self.limits.1.saturating_add(self.exposed.1),
        );
    }

    /// The cache over `modules` modules, with the monitor and limits the
    /// parameters ask for.
    pub(super) fn new(
        modules: usize,
        params: &ParamStore,
    ) -> Result<Self, crate::memory::MonitorError> {
        let monitor = Monitor::from_params(params)?;
        let limit = |name: &str, default: usize| match params.value(name) {
            Some(
                fireopal_abi::param::ParamValue::UInt(v) | fireopal_abi::param::ParamValue::Size(v),
            ) if *v > 0 => usize::try_from(*v).unwrap_or(usize::MAX),
            _ => default,
        };
        let config = RegCacheConfig {
            page_size: crate::memory::page_size(),
            max_count: limit("rcache_max_count", usize::MAX),
            max_bytes: limit("rcache_max_bytes", usize::MAX),
            merge: true,
        };
        let cache = RegCache::new(config).unwrap_or_default();
        let limits = (config.max_count, config.max_bytes);
        let released = Arc::new(Released::default());
        let transports = (0..modules)
            .map(|module| {
                cache.add_transport(ModuleRegistrar {
                    module,
                    released: Arc::clone(&released),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_default();
        Ok(Self {
            cache,
            limits,
            exposed: (0, 0),
            transports,
            released,
            userfaultfd: monitor.userfaultfd.map(|u| (u, Subscription::new())),
            report: monitor.report,
        })
    }

    /// Applies what the monitor reported since the last call.
    #[inline]
    fn apply_monitor(&mut self) {
        if let Some((_, sub)) = &mut self.userfaultfd {
            if sub.pending() {
                let cache = &self.cache;
                sub.drain(|addr, len| {
                    cache.invalidate(addr, len);
                });
            }
        }
    }

    /// Whether a released registration may stay cached.
    fn keeps(&self, watched: bool) -> bool {
        match self.report.leave_pinned {
            LeavePinned::Always => true,
            LeavePinned::Never => false,
            LeavePinned::Watched => watched,
        }
    }
}

/// The cache's rights for the module's: the cache has no bit for local
/// reads (always granted) and numbers the others from local writes.
fn cache_access(access: Access) -> regcache::Access {
    regcache::Access::from_bits((access.0 >> 1) as u8)
}

/// The module's rights for the cache's, local reads included.
fn module_access(rights: regcache::Access) -> Access {
    Access((u32::from(rights.bits()) << 1) | Access::LOCAL_READ.0)
}

impl Messenger {
    /// Registers memory with the module that serves `peer`, for RDMA by
    /// that peer (or to that peer), through the messenger's registration
    /// cache: registering the same buffer again (or memory inside a cached
    /// registration) registers nothing. `Unsupported` is a normal answer.
    ///
    /// The memory must stay mapped while the handle is held; once it is
    /// released, the cache notices the memory going away (see
    /// [`memory`](crate::memory)). On a route of several modules the memory
    /// is registered on each, and the remote key names them all, so that
    /// a peer's RDMA on it is striped.
    pub fn register_memory(
        &mut self,
        peer: Rank,
        region: MemRegion,
        access: Access,
    ) -> Result<MemoryHandle, SendError> {
        let i = self.module_for(peer)?;
        let remote = Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0;
        let needs_local = self.slots[i]
            .attrs
            .flags
            .contains(BtlFlags::NEEDS_LOCAL_REGISTRATION);
        if access.0 & remote == 0 && !needs_local {
            return Ok(MemoryHandle {
                held: Held::Unregistered,
            });
        }
        let route = &self.shared.routes[peer as usize];
        if !route.sequenced || route.modules.len() < 2 {
            let reg = self.register_on(i, peer, region, access)?;
            return Ok(MemoryHandle {
                held: Held::Cached(reg),
            });
        }
        // Every lane registers, so that RDMA can be striped over them.
        let lanes = route.modules.clone();
        let mut regs = Vec::with_capacity(lanes.len());
        for (k, &m) in lanes.iter().enumerate() {
            match self.register_on(m, peer, region, access) {
                Ok(reg) => regs.push((m, reg)),
                Err(e) if k == 0 => return Err(e),
                // A lane that cannot register takes no part in striping.
                Err(_) => {}
            }
        }
        // The key must fit in an announcement of the point-to-point layer.
        let key = loop {
            let entries = self.key_entries(&regs);
            match encode_lane_keys(&entries) {
                Ok(key) if key.len() <= MAX_KEY_LEN && entries.len() == regs.len() => break key,
                _ if regs.len() > 2 => {
                    let dropped = regs.pop();
                    drop(dropped);
                }
                _ => {
                    regs.truncate(1);
                    break Vec::new();
                }
            }
        };
        self.carry_out_releases();
        if key.is_empty() {
            let (_, reg) = regs.pop().ok_or(SendError::Unreachable(peer))?;
            return Ok(MemoryHandle {
                held: Held::Cached(reg),
            });
        }
        Ok(MemoryHandle {
            held: Held::Lanes {
                regs,
                key,
                exposed: false,
            },
        })
    }

    /// The entries of a lane key naming each module's registration.
    pub(super) fn key_entries<'a>(
        &'a self,
        regs: &'a [(usize, Registration<ModuleRegistrar>)],
    ) -> Vec<DirectoryEntry<'a>> {
        regs.iter()
            .filter_map(|(m, reg)| {
                let slot = self.slots.get(*m)?;
                Some(DirectoryEntry {
                    component: &slot.component,
                    index: u16::try_from(slot.index).ok()?,
                    address: &reg.handle().remote_key,
                })
            })
            .collect()
    }

    /// A registration of `region` on module `i` through the cache.
    #[allow(unsafe_code)]
    pub(super) fn register_on(
        &mut self,
        i: usize,
        peer: Rank,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration<ModuleRegistrar>, SendError> {
        let regs = &mut self.registrations;
        regs.apply_monitor();
        let transport = *regs.transports.get(i).ok_or(SendError::Unreachable(peer))?;
        let slot = &mut self.slots[i];
        if let Some(error) = &slot.closed {
            return Err(SendError::Closed {
                component: slot.component.clone(),
                error: error.clone(),
            });
        }
        let module = &mut slot.module;
        let monitor = regs.userfaultfd.as_ref().map(|(u, _)| *u);
        let got = regs.cache.get_with(
            region.addr(),
            region.len(),
            cache_access(access),
            transport,
            |pages, rights| {
                // SAFETY: the pages cover the caller's region, which the
                // caller keeps mapped while the registration is in use.
                let whole = unsafe { MemRegion::new(pages.base() as *mut u8, pages.len()) };
                let reg = match module.register_mem(whole, module_access(rights)) {
                    RResult::ROk(reg) => reg,
                    RResult::RErr(e) => return Err(e),
                };
                let watched = monitor.is_some_and(|m| m.watch(pages.base(), pages.len()).is_ok());
                Ok(ModuleRegistration {
                    id: reg.id,
                    remote_key: reg.remote_key.into_vec(),
                    watched,
                })
            },
        );
        self.carry_out_releases();
        got.map_err(SendError::Registration)
    }

    /// Releases a registration; operations using it must be complete. The
    /// registration stays cached for the next use of the same memory when
    /// it is safe to (see [`memory`](crate::memory)).
    pub fn deregister_memory(&mut self, handle: MemoryHandle) -> Result<(), SendError> {
        let regs = match handle.held {
            Held::Cached(reg) => vec![reg],
            Held::Lanes { regs, exposed, .. } => {
                if exposed {
                    self.registrations.exposed_change(&regs, false);
                }
                regs.into_iter().map(|(_, r)| r).collect()
            }
            Held::Unregistered => Vec::new(),
        };
        for reg in regs {
            let region = reg.region();
            let keep = self.registrations.keeps(reg.handle().watched);
            drop(reg);
            if !keep {
                self.registrations
                    .cache
                    .invalidate(region.base(), region.len());
            }
        }
        self.carry_out_releases();
        Ok(())
    }

    /// Drops every cached registration touching `[addr, addr + len)`: for
    /// a runtime that learns of memory leaving the process by its own
    /// hooks. Registrations still held are deregistered at their release.
    /// Returns how many were dropped.
    pub fn invalidate_memory(&mut self, addr: usize, len: usize) -> usize {
        let dropped = self.registrations.cache.invalidate(addr, len);
        self.carry_out_releases();
        dropped
    }

    /// The registration cache's counters.
    pub fn registration_stats(&self) -> CacheStats {
        self.registrations.cache.stats()
    }

    /// Which memory monitor the messenger uses, and why not the others.
    pub fn memory_monitor(&self) -> &MonitorReport {
        &self.registrations.report
    }

    /// Applies the monitor's reports, and carries out deregistrations left
    /// by handles dropped without [`deregister_memory`](Self::deregister_memory):
    /// at the start of every `progress`, so that a registration of memory
    /// gone is released before a peer's operation on it is served. Two
    /// atomic loads when there is nothing to do.
    #[inline]
    pub(super) fn watch_memory(&mut self) {
        if self
            .registrations
            .userfaultfd
            .as_ref()
            .is_some_and(|(_, sub)| sub.pending())
        {
            self.registrations.apply_monitor();
        }
        self.carry_out_releases();
    }

    /// Carries out the module deregistrations the cache queued.
    #[inline(always)]
    fn carry_out_releases(&mut self) {
        // One load on every poll; the work, rare, out of line.
        if self.registrations.released.queued.load(Ordering::Acquire) {
            self.carry_out_queued_releases();
        }
    }

    #[cold]
    #[inline(never)]
    fn carry_out_queued_releases(&mut self) {
        let list = {
            let mut list = self
                .registrations
                .released
                .list
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.registrations
                .released
                .queued
                .store(false, Ordering::Relaxed);
            std::mem::take(&mut *list)
        };
        for (module, id) in list {
            if let Some(slot) = self.slots.get_mut(module) {
                if slot.closed.is_none() {
                    // A refusal leaves nothing to undo: the module no longer
                    // knows the registration either way.
                    let _ = slot.module.deregister_mem(id);
                }
            }
        }
    }
}
