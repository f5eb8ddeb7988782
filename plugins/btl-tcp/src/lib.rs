//! `tcp`: the byte transfer layer that works between any two machines.
//!
//! The component opens one module per (interface address, link): each
//! module listens on its own socket, and every module publishes the whole
//! list of the process's listening sockets (so whichever module's address
//! the host hands to a peer, the peer finds its partner in it). Peers pair
//! their modules deterministically (see `select`), connect on first use,
//! and prove to each other that they hold the job key before any frame
//! flows: a connection that cannot is dropped and logged. Sockets are
//! non-blocking and driven by `progress` through epoll.
//!
//! Parameters (all `btl_tcp_*`): `if_include` / `if_exclude`, `ipv6`,
//! `links`, `eager_limit`, `max_send_size`, `sndbuf` / `rcvbuf`,
//! `write_chunk`, `sendi_batch`, `recv_staging`, `handshake_timeout_ms`,
//! `max_unauthenticated`, `keepalive_time` / `keepalive_intvl` /
//! `keepalive_probes`, `ack_timeout_ms`, `user_timeout_ms`, `congestion`,
//! `priority`, `latency_ns`, `bandwidth_mbps`; `fireopal info` shows their
//! help. Every process of a job must use the same `max_send_size` (it is
//! also the largest frame a receiver accepts).
//!
//! Connections between ranks of one host use Reno congestion control
//! (`congestion`, see `config::Congestion`): over loopback the common
//! default, BBR, keeps about a megabyte in flight and makes a large
//! message wait for acknowledgements.
//!
//! A peer that closes its connection is failed at once. One that goes
//! silent without closing it (its machine died, the network between was
//! cut) is failed within about a minute by default, whether or not data
//! is in flight:
//! - while the connection is idle, by TCP keepalive: after
//!   `keepalive_time` seconds without traffic the kernel probes, and after
//!   `keepalive_probes` unanswered probes the connection reports an error;
//! - while sent data is unacknowledged, by the module itself: `progress`
//!   reads the kernel's acknowledgement state (`TCP_INFO`) of each
//!   connection now and then, and fails a peer whose machine has been
//!   retransmitted to, or has left its zero window unanswered, for
//!   `ack_timeout_ms` (the kernel alone would go on for about fifteen
//!   minutes).
//!
//! A peer that only stops reading, as a rank deep in computation does, is
//! never failed by either: its kernel answers probes and acknowledges what
//! fits in its window. `user_timeout_ms` (`TCP_USER_TIMEOUT`, off by
//! default) is stricter: the kernel applies it to a shut window too, so it
//! also fails a peer that does not read for that long.
//!
//! The crate builds as the plugin `libfireopal_btl_tcp.so` and as an rlib
//! so its tests can drive modules in-process.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod admission;
mod align;
mod config;
mod conn;
mod failure;
mod handshake;
mod module;
mod peers;
mod queue;
mod rdma;
mod receive;
mod select;
mod send;
mod sys;

use std::net::SocketAddr;

use fireopal_abi::btl::BtlComponentImpl;
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::param::ParamRegistrar;
use fireopal_abi::{Availability, ComponentVersion, ErrorKind, PluginError};
use fireopal_core::wire::tcp::address::{encode_addresses, AddressEntry, InterfaceName};

pub use module::TcpModule;

use config::Settings;
use sys::Socket;

/// The `tcp` component.
#[derive(Debug)]
pub struct TcpComponent;

impl BtlComponentImpl for TcpComponent {
    const NAME: &'static str = "tcp";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = TcpModule;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        config::register(registry)
    }

    fn query(host: &Host) -> Availability {
        // tcp never carries messages to the process itself (the self BTL
        // does), so a job of one has nothing for it: no socket is opened.
        let size = host.job().size;
        if size < 2 {
            return Availability::Unavailable {
                reason: format!("a job of {size} process has no peer to reach over tcp").into(),
            };
        }
        let mut settings = match Settings::from_host(host) {
            Ok(s) => s,
            Err(e) => {
                return Availability::Unavailable {
                    reason: e.to_string().into(),
                }
            }
        };
        match settings.interfaces() {
            Ok(list) if list.is_empty() => Availability::Unavailable {
                reason: "no usable interface matches the tcp interface parameters".into(),
            },
            Ok(list) => {
                // What `fireopal info` shows: where a rank would listen
                // (each on a port of its own, chosen when it opens).
                let addrs: Vec<String> = list
                    .iter()
                    .map(|i| format!("{} {}", i.name, i.ip))
                    .collect();
                Availability::AvailableWithNote {
                    priority: settings.priority,
                    note: format!("listens on {}", addrs.join(", ")).into(),
                }
            }
            Err(e) => Availability::Unavailable {
                reason: e.to_string().into(),
            },
        }
    }

    fn open(host: Host) -> Result<Vec<TcpModule>, PluginError> {
        let mut settings = Settings::from_host(&host)?;
        let interfaces = settings.interfaces()?;
        settings.congestion.check()?;
        let mut entries = Vec::new();
        let mut listeners = Vec::new();
        for iface in &interfaces {
            let name = InterfaceName::new(&iface.name)
                .map_err(|e| PluginError::invalid(format!("interface {:?}: {e}", iface.name)))?;
            for link in 0..settings.links {
                let sock = Socket::listen(SocketAddr::new(iface.ip, 0), settings.buffers).map_err(
                    |e| {
                        PluginError::new(
                            ErrorKind::IO,
                            format!("cannot listen on {} ({}): {e}", iface.ip, iface.name),
                        )
                    },
                )?;
                let port = sock
                    .local_addr()
                    .map_err(|e| module::io_error("cannot read the listening port", &e))?
                    .port();
                entries.push(AddressEntry {
                    name,
                    ip: iface.ip,
                    prefix_len: iface.prefix_len,
                    port,
                    link,
                    loopback: iface.loopback,
                });
                listeners.push(sock);
            }
        }
        let address =
            encode_addresses(&entries).map_err(|e| PluginError::invalid(e.to_string()))?;
        let mut modules = Vec::with_capacity(listeners.len());
        for (index, listener) in listeners.into_iter().enumerate() {
            modules.push(TcpModule::new(
                host.clone(),
                settings.clone(),
                entries.clone(),
                index,
                address.clone(),
                listener,
            )?);
        }
        let list: Vec<String> = entries
            .iter()
            .map(|e| format!("{} {}:{} link {}", e.name, e.ip, e.port, e.link))
            .collect();
        host.log(
            LogLevel::Info,
            &format!("tcp: listening on {}", list.join(", ")),
        );
        Ok(modules)
    }
}

/// The plugin's root module (what the host loads).
pub mod root {
    // The macro's expansion includes a static abi_stable generates.
    #![allow(missing_docs)]
    fireopal_abi::export_btl_component!(super::TcpComponent);
}

/// Hasher of maps keyed by ranks and ids (chosen by this process or
/// checked before use).
pub(crate) use fireopal_core::id_hash::IdHash as RankHash;
