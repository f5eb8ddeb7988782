//! Finding a device and port, and owning the verbs objects made on it:
//! the context, the protection domain, the completion queue, the shared
//! receive queue, memory regions and address handles. Each object is a
//! value that destroys itself when dropped; the queue pairs are in
//! [`crate::qp`].

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::fmt;
use std::io;
use std::ptr;
use std::sync::Arc;

use fireopal_core::wire::verbs::LinkLayer;

use crate::config::Settings;
use crate::ffi::library::Verbs;
use crate::ffi::rc_error;
use crate::ffi::types::*;

/// Why no device can be used.
#[derive(Debug)]
pub(crate) enum DeviceError {
    /// `ibv_get_device_list` failed.
    List(io::Error),
    /// It found no device.
    NoDevices,
    /// The device named by `btl_verbs_device` is not there.
    NotFound {
        /// The name asked for.
        wanted: String,
        /// The devices there are.
        present: Vec<String>,
    },
    /// No port of the devices looked at is active.
    NoActivePort {
        /// Each device and port looked at, with its state.
        looked_at: Vec<String>,
    },
    /// A verbs call on the chosen device failed.
    Call {
        /// The device.
        device: String,
        /// The call.
        what: &'static str,
        /// Its error.
        error: io::Error,
    },
    /// An Ethernet port has no GID to route RoCE with.
    NoGid {
        /// The device and port.
        port: String,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::List(e) => write!(f, "no RDMA device: ibv_get_device_list: {}", os_text(e)),
            Self::NoDevices => f.write_str("no RDMA device: ibv_get_device_list found none"),
            Self::NotFound { wanted, present } => write!(
                f,
                "no RDMA device {wanted:?} (devices: {})",
                present.join(", ")
            ),
            Self::NoActivePort { looked_at } => {
                write!(f, "no active RDMA port ({})", looked_at.join(", "))
            }
            Self::Call {
                device,
                what,
                error,
            } => write!(f, "{device}: {what} failed: {}", os_text(error)),
            Self::NoGid { port } => write!(f, "{port}: Ethernet port without a usable GID"),
        }
    }
}

/// An error's text without std's " (os error N)" suffix, as `perror`
/// and the verbs tools print it.
fn os_text(e: &io::Error) -> String {
    let text = e.to_string();
    match (e.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(at)) => text[..at].to_owned(),
        _ => text,
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::List(e) | Self::Call { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// An open device context.
pub(crate) struct Context {
    pub(crate) verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_context,
    pub(crate) name: String,
}

// SAFETY: libibverbs objects may be used from any thread; the module that
// owns them is used by one thread at a time.
unsafe impl Send for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("name", &self.name).finish()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `raw` came from ibv_open_device, and every object made on
        // it is dropped before the context (it owns none of them, but the
        // module declares its fields in that order).
        unsafe { (self.verbs.ibv_close_device)(self.raw) };
    }
}

/// The port chosen for the modules.
#[derive(Debug, Clone)]
pub(crate) struct PortInfo {
    pub(crate) port: u8,
    pub(crate) attr: ibv_port_attr,
    pub(crate) link_layer: LinkLayer,
    pub(crate) gid: [u8; 16],
    pub(crate) gid_index: u8,
    pub(crate) max_qp_rd_atom: u8,
    pub(crate) max_cqe: u32,
}

impl PortInfo {
    /// `device:port` as a person writes it.
    pub(crate) fn describe(&self, device: &str) -> String {
        format!("{device}:{} ({})", self.port, self.link_layer)
    }
}

fn name_of(dev: *mut ibv_device) -> String {
    // SAFETY: `dev` is an entry of a live device list; `name` is a
    // NUL-terminated array inside it (the last byte is forced below).
    let name = unsafe { &(*dev).name };
    let bytes: Vec<u8> = name
        .iter()
        .take(IBV_SYSFS_NAME_MAX - 1)
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Opens the device and port `settings` ask for (or the first active
/// port), and reads what the address needs.
pub(crate) fn open(
    verbs: &Arc<Verbs>,
    settings: &Settings,
) -> Result<(Context, PortInfo), DeviceError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer; the list is freed below.
    let list = unsafe { (verbs.ibv_get_device_list)(&mut count) };
    if list.is_null() {
        return Err(DeviceError::List(io::Error::last_os_error()));
    }
    let n = usize::try_from(count).unwrap_or(0);
    let devices: Vec<*mut ibv_device> = (0..n)
        // SAFETY: the list holds `count` entries followed by NULL.
        .map(|i| unsafe { *list.add(i) })
        .take_while(|d| !d.is_null())
        .collect();
    let result = choose(verbs, settings, &devices);
    // SAFETY: `list` came from ibv_get_device_list; opened contexts stay
    // valid after it is freed.
    unsafe { (verbs.ibv_free_device_list)(list) };
    result
}

fn choose(
    verbs: &Arc<Verbs>,
    settings: &Settings,
    devices: &[*mut ibv_device],
) -> Result<(Context, PortInfo), DeviceError> {
    if devices.is_empty() {
        return Err(DeviceError::NoDevices);
    }
    let names: Vec<String> = devices.iter().map(|&d| name_of(d)).collect();
    let wanted = settings.device.as_ref();
    if let Some((w, _)) = wanted {
        if !names.iter().any(|n| n == w) {
            return Err(DeviceError::NotFound {
                wanted: w.clone(),
                present: names,
            });
        }
    }
    let mut looked_at = Vec::new();
    for (&dev, name) in devices.iter().zip(&names) {
        if wanted.is_some_and(|(w, _)| w != name) {
            continue;
        }
        // SAFETY: `dev` is an entry of the live list.
        let raw = unsafe { (verbs.ibv_open_device)(dev) };
        if raw.is_null() {
            looked_at.push(format!(
                "{name}: cannot open: {}",
                io::Error::last_os_error()
            ));
            continue;
        }
        let ctx = Context {
            verbs: Arc::clone(verbs),
            raw,
            name: name.clone(),
        };
        let mut dattr = std::mem::MaybeUninit::<ibv_device_attr>::zeroed();
        // SAFETY: `dattr` is writable and of the header's size.
        let rc = unsafe { (verbs.ibv_query_device)(raw, dattr.as_mut_ptr()) };
        if rc != 0 {
            looked_at.push(format!("{name}: ibv_query_device: {}", rc_error(rc)));
            continue;
        }
        // SAFETY: zero is a valid value of every field, and the call
        // succeeded.
        let dattr = unsafe { dattr.assume_init() };
        for port in 1..=dattr.phys_port_cnt {
            if wanted.is_some_and(|(_, p)| p.is_some_and(|p| p != port)) {
                continue;
            }
            let mut pattr = ibv_port_attr::default();
            // SAFETY: `pattr` is a zeroed, full-size ibv_port_attr.
            let rc = unsafe { (verbs.ibv_query_port)(raw, port, &mut pattr) };
            if rc != 0 {
                looked_at.push(format!("{name}:{port}: ibv_query_port: {}", rc_error(rc)));
                continue;
            }
            if pattr.state != IBV_PORT_ACTIVE {
                looked_at.push(format!("{name}:{port} state {}", pattr.state));
                continue;
            }
            let link_layer = match pattr.link_layer {
                IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                IBV_LINK_LAYER_INFINIBAND | IBV_LINK_LAYER_UNSPECIFIED => LinkLayer::InfiniBand,
                other => {
                    looked_at.push(format!("{name}:{port} link layer {other}"));
                    continue;
                }
            };
            let (gid_index, gid) = match pick_gid(&ctx, port, &pattr, link_layer, settings) {
                Some(g) => g,
                None if link_layer == LinkLayer::Ethernet => {
                    return Err(DeviceError::NoGid {
                        port: format!("{name}:{port}"),
                    })
                }
                None => (0, [0; 16]),
            };
            let info = PortInfo {
                port,
                attr: pattr,
                link_layer,
                gid,
                gid_index,
                max_qp_rd_atom: u8::try_from(dattr.max_qp_rd_atom.clamp(1, 16)).unwrap_or(1),
                max_cqe: u32::try_from(dattr.max_cqe).unwrap_or(0),
            };
            return Ok((ctx, info));
        }
    }
    Err(DeviceError::NoActivePort { looked_at })
}

fn query_gid(ctx: &Context, port: u8, index: c_int) -> Option<[u8; 16]> {
    let mut gid = ibv_gid::default();
    // SAFETY: `gid` is a writable ibv_gid; the context is open.
    let rc = unsafe { (ctx.verbs.ibv_query_gid)(ctx.raw, port, index, &mut gid) };
    (rc == 0 && gid.raw != [0; 16]).then_some(gid.raw)
}

/// The GID type the kernel reports for a table entry ("IB/RoCE v1",
/// "RoCE v2"), from sysfs; `None` where it does not say.
fn gid_type(device: &str, port: u8, index: c_int) -> Option<String> {
    let path = format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}");
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The GID to publish: the one asked for, index 0 on InfiniBand, and on
/// Ethernet a RoCE v2 GID holding an IPv4 address (routable, the usual
/// choice of a cluster), else any RoCE v2 GID, else the first set.
fn pick_gid(
    ctx: &Context,
    port: u8,
    attr: &ibv_port_attr,
    link_layer: LinkLayer,
    settings: &Settings,
) -> Option<(u8, [u8; 16])> {
    if let Some(i) = settings.gid_index {
        return query_gid(ctx, port, c_int::from(i)).map(|g| (i, g));
    }
    if link_layer == LinkLayer::InfiniBand {
        return query_gid(ctx, port, 0).map(|g| (0, g));
    }
    let len = attr.gid_tbl_len.clamp(0, 256);
    let mut first = None;
    let mut v2 = None;
    for i in 0..len {
        let Some(g) = query_gid(ctx, port, i) else {
            continue;
        };
        let Ok(index) = u8::try_from(i) else { break };
        first.get_or_insert((index, g));
        if gid_type(&ctx.name, port, i).as_deref() == Some("RoCE v2") {
            let v4_mapped = g[..10] == [0; 10] && g[10..12] == [0xff, 0xff];
            if v4_mapped {
                return Some((index, g));
            }
            v2.get_or_insert((index, g));
        }
    }
    v2.or(first)
}

/// A protection domain.
pub(crate) struct Pd {
    verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_pd,
}

// SAFETY: as for `Context`.
unsafe impl Send for Pd {}

impl Pd {
    pub(crate) fn new(ctx: &Context) -> io::Result<Self> {
        // SAFETY: the context is open.
        let raw = unsafe { (ctx.verbs.ibv_alloc_pd)(ctx.raw) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            verbs: Arc::clone(&ctx.verbs),
            raw,
        })
    }

    /// The library the domain was made with.
    pub(crate) fn verbs(&self) -> &Arc<Verbs> {
        &self.verbs
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: made by ibv_alloc_pd; every object on it is dropped first.
        unsafe { (self.verbs.ibv_dealloc_pd)(self.raw) };
    }
}

/// A completion queue, shared by every queue pair of a module.
pub(crate) struct Cq {
    verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_cq,
}

// SAFETY: as for `Context`.
unsafe impl Send for Cq {}

impl Cq {
    pub(crate) fn new(ctx: &Context, entries: u32) -> io::Result<Self> {
        let cqe = c_int::try_from(entries).unwrap_or(c_int::MAX);
        // SAFETY: the context is open; no channel, no completion vector.
        let raw =
            unsafe { (ctx.verbs.ibv_create_cq)(ctx.raw, cqe, ptr::null_mut(), ptr::null_mut(), 0) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            verbs: Arc::clone(&ctx.verbs),
            raw,
        })
    }

    /// Up to `out.len()` completions.
    pub(crate) fn poll(&self, out: &mut [ibv_wc]) -> io::Result<usize> {
        // SAFETY: the queue is live while `self` is.
        unsafe { crate::ffi::poll_cq(self.raw, out) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: made by ibv_create_cq; the queue pairs using it go first.
        unsafe { (self.verbs.ibv_destroy_cq)(self.raw) };
    }
}

/// A shared receive queue.
pub(crate) struct Srq {
    verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_srq,
}

// SAFETY: as for `Context`.
unsafe impl Send for Srq {}

impl Srq {
    pub(crate) fn new(pd: &Pd, entries: u32) -> io::Result<Self> {
        let mut init = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: entries,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: the domain is live; `init` is valid for the call.
        let raw = unsafe { (pd.verbs.ibv_create_srq)(pd.raw, &mut init) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            verbs: Arc::clone(&pd.verbs),
            raw,
        })
    }

    /// Posts one receive buffer.
    ///
    /// # Safety
    ///
    /// `sge` must name memory registered on the queue's domain that stays
    /// allocated and untouched until its completion is polled.
    pub(crate) unsafe fn post(&self, wr_id: u64, mut sge: ibv_sge) -> io::Result<()> {
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: the queue is live; the caller vouches for the buffer.
        unsafe { crate::ffi::post_srq_recv(self.raw, &mut wr) }
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: made by ibv_create_srq; the queue pairs using it go first.
        unsafe { (self.verbs.ibv_destroy_srq)(self.raw) };
    }
}

/// A registered memory region.
pub(crate) struct Mr {
    verbs: Arc<Verbs>,
    raw: *mut ibv_mr,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

// SAFETY: as for `Context`.
unsafe impl Send for Mr {}

impl Mr {
    /// Registers `len` bytes at `addr` with `access` (`IBV_ACCESS_*`).
    ///
    /// # Safety
    ///
    /// The memory must stay mapped while the region lives, and be touched
    /// by the device only as the caller's operations allow.
    pub(crate) unsafe fn new(
        pd: &Pd,
        addr: *mut u8,
        len: usize,
        access: c_int,
    ) -> io::Result<Self> {
        // SAFETY: the domain is live; the caller vouches for the memory.
        let raw = unsafe { (pd.verbs.ibv_reg_mr)(pd.raw, addr.cast(), len, access) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a non-null answer is a live ibv_mr.
        let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
        Ok(Self {
            verbs: Arc::clone(&pd.verbs),
            raw,
            lkey,
            rkey,
        })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: made by ibv_reg_mr; operations on it are complete (the
        // contract of deregistration, and of dropping a module).
        unsafe { (self.verbs.ibv_dereg_mr)(self.raw) };
    }
}

/// An address handle: the route to a peer's port for datagrams.
pub(crate) struct Ah {
    verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_ah,
}

// SAFETY: as for `Context`.
unsafe impl Send for Ah {}

impl Ah {
    pub(crate) fn new(pd: &Pd, attr: &ibv_ah_attr) -> io::Result<Self> {
        let mut attr = *attr;
        // SAFETY: the domain is live; `attr` is valid for the call.
        let raw = unsafe { (pd.verbs.ibv_create_ah)(pd.raw, &mut attr) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            verbs: Arc::clone(&pd.verbs),
            raw,
        })
    }
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ah")
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: made by ibv_create_ah; datagrams using it are complete.
        unsafe { (self.verbs.ibv_destroy_ah)(self.raw) };
    }
}
