//! `verbs`: the byte transfer layer over InfiniBand and RoCE, through
//! libibverbs.
//!
//! The plugin opens `libibverbs.so.1` with `dlopen` when it is queried
//! (`btl_verbs_library` names another file), so it loads everywhere and
//! declines, with the reason `fireopal info` shows, where the library, a
//! device, an active port, or the resources it needs are missing.
//!
//! On a usable port one module is opened, made as verbs transports on
//! current hardware are:
//!
//! - one reliable-connected queue pair per peer, connected on first use
//!   through a request and reply on the module's datagram queue pair,
//!   signed with the job key (HMAC-SHA256) so that only the job's
//!   processes connect to its queue pairs; the
//!   published address (`core::wire::verbs`) holds what a peer needs for
//!   that: LID and GID, link layer, MTU, the datagram queue pair and its
//!   key, the starting packet sequence number, the credits granted and
//!   the receive buffer size. RoCE is routed by GID (a global route header
//!   on every packet), InfiniBand by LID within a subnet and by GID across;
//! - one shared receive queue for every connection, with credit-based
//!   flow control ([`credit`]);
//! - `sendi` posts small messages inline (the device copies them from the
//!   request) and copies larger ones into registered send buffers, as
//!   `send` does;
//! - `put` and `get` are RDMA writes and reads on memory registered with
//!   `ibv_reg_mr` through `register_mem` (the messenger's registration
//!   cache calls it; local memory must be registered too,
//!   `NEEDS_LOCAL_REGISTRATION`); remote keys carry the registered range
//!   and rights, so an operation the target would refuse (which would
//!   break the connection) fails before it is posted;
//! - completions are polled, and sends are signalled selectively
//!   ([`signal`]); work-completion errors map to the BTL's errors in
//!   [`completion`].
//!
//! The data path needs a device and is tested only where one exists
//! (`tests/btl_verbs_hw.rs`); everything that needs none (wire formats in
//! core, [`credit`], [`signal`], [`completion`], the structure layouts in
//! [`ffi`]) is tested everywhere.
//!
//! Parameters (all `btl_verbs_*`): `library`, `device`, `gid_index`,
//! `fragment_size`, `eager_limit`, `max_inline`, `credits`, `srq_size`,
//! `send_queue`, `signal_interval`, `timeout`, `retry_count`,
//! `service_level`, `traffic_class`, `priority`, `latency_ns`,
//! `bandwidth_mbps`; `fireopal info` shows their help.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod buffers;
pub mod completion;
mod config;
mod conn;
pub mod credit;
mod device;
pub mod ffi;
mod module;
mod progress;
mod qp;
pub mod signal;

use std::sync::Arc;

use fireopal_abi::btl::BtlComponentImpl;
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::param::ParamRegistrar;
use fireopal_abi::{Availability, ComponentVersion, ErrorKind, PluginError};

pub use module::VerbsModule;

use config::Settings;
use device::{Context, Cq, DeviceError, Pd, PortInfo, Srq};
use ffi::library::Verbs;

/// The `verbs` component.
#[derive(Debug)]
pub struct VerbsComponent;

/// Why the component declines.
#[derive(Debug)]
enum Decline {
    Config(config::ConfigError),
    Load(ffi::library::LoadError),
    Device(DeviceError),
}

impl std::fmt::Display for Decline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::Load(e) => e.fmt(f),
            Self::Device(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Decline {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::Load(e) => Some(e),
            Self::Device(e) => Some(e),
        }
    }
}

impl From<Decline> for PluginError {
    fn from(d: Decline) -> Self {
        let kind = match d {
            Decline::Config(_) => ErrorKind::INVALID_ARGUMENT,
            _ => ErrorKind::UNSUPPORTED,
        };
        PluginError::new(kind, d.to_string())
    }
}

/// The settings, the library, and the open device and port.
fn probe(host: &Host) -> Result<(Settings, Arc<Verbs>, Context, PortInfo), Decline> {
    let settings = Settings::from_host(host).map_err(Decline::Config)?;
    let verbs = Verbs::load(&settings.library).map_err(Decline::Load)?;
    let (ctx, port) = device::open(&verbs, &settings).map_err(Decline::Device)?;
    Ok((settings, verbs, ctx, port))
}

/// Whether the device can make what a module needs: a protection domain,
/// a completion queue and a shared receive queue of the configured size.
fn check_resources(ctx: &Context, settings: &Settings) -> Result<(), DeviceError> {
    let call = |what: &'static str| {
        move |error| DeviceError::Call {
            device: ctx.name.clone(),
            what,
            error,
        }
    };
    let pd = Pd::new(ctx).map_err(call("ibv_alloc_pd"))?;
    let cq = Cq::new(ctx, 16).map_err(call("ibv_create_cq"))?;
    let srq = Srq::new(&pd, settings.srq_size).map_err(call("ibv_create_srq"))?;
    drop((srq, cq, pd));
    Ok(())
}

impl BtlComponentImpl for VerbsComponent {
    const NAME: &'static str = "verbs";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = VerbsModule;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        config::register(registry)
    }

    fn query(host: &Host) -> Availability {
        let unavailable = |reason: String| Availability::Unavailable {
            reason: reason.into(),
        };
        let (settings, _verbs, ctx, port) = match probe(host) {
            Ok(p) => p,
            Err(e) => return unavailable(e.to_string()),
        };
        if let Err(e) = check_resources(&ctx, &settings) {
            return unavailable(e.to_string());
        }
        // Like tcp, verbs never carries a process's messages to itself.
        let size = host.job().size;
        if size < 2 {
            return unavailable(format!(
                "{} is usable, but a job of {size} process has no peer to reach over verbs",
                port.describe(&ctx.name)
            ));
        }
        Availability::AvailableWithNote {
            priority: settings.priority,
            note: format!(
                "{}, lid {}, gid index {}",
                port.describe(&ctx.name),
                port.attr.lid,
                port.gid_index
            )
            .into(),
        }
    }

    fn open(host: Host) -> Result<Vec<VerbsModule>, PluginError> {
        let (settings, _verbs, ctx, port) = probe(&host)?;
        let where_ = port.describe(&ctx.name);
        let module = VerbsModule::new(host.clone(), settings, ctx, port)?;
        host.log(LogLevel::Info, &format!("verbs: using {where_}"));
        Ok(vec![module])
    }
}

/// The plugin's root module (what the host loads).
pub mod root {
    // The macro's expansion includes a static abi_stable generates.
    #![allow(missing_docs)]
    fireopal_abi::export_btl_component!(super::VerbsComponent);
}

/// Hasher of maps keyed by ranks, ids and queue pair numbers (chosen by
/// this process or checked before use).
pub(crate) use fireopal_core::id_hash::IdHash as RankHash;
