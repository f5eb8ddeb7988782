//! Queue pairs: the reliable-connected one per peer and the module's one
//! datagram queue pair that sets connections up, their state changes
//! (reset, init, ready to receive, ready to send), and posting to them.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::ptr;
use std::sync::Arc;

use fireopal_core::wire::verbs::VerbsAddress;

use crate::device::{Cq, Pd, PortInfo, Srq};
use crate::ffi::library::Verbs;
use crate::ffi::rc_error;
use crate::ffi::types::*;

/// `IBV_QPS_ERR`.
const IBV_QPS_ERR: u32 = 6;
/// Receiver-not-ready retries: 7 means retry for ever, so a sender beyond
/// its share of the shared receive queue waits instead of failing.
const RNR_RETRY_FOREVER: u8 = 7;
/// Receiver-not-ready delay code 12: 0.64 ms.
const MIN_RNR_TIMER: u8 = 12;
/// Hop limit of global route headers.
const HOP_LIMIT: u8 = 64;

/// What a connection needs of the module's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathParams {
    pub(crate) timeout: u8,
    pub(crate) retry_count: u8,
    pub(crate) service_level: u8,
    pub(crate) traffic_class: u8,
}

/// A queue pair.
pub(crate) struct Qp {
    verbs: Arc<Verbs>,
    pub(crate) raw: *mut ibv_qp,
    pub(crate) qpn: u32,
    /// Bytes the device copies from a request itself.
    pub(crate) max_inline: u32,
}

// SAFETY: libibverbs objects may be used from any thread; the module that
// owns them is used by one thread at a time.
unsafe impl Send for Qp {}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qpn", &self.qpn).finish()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: made by ibv_create_qp; the module drops it before the
        // queues and domain it was made on.
        unsafe { (self.verbs.ibv_destroy_qp)(self.raw) };
    }
}

/// Sizes of a queue pair to create.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpSizes {
    pub(crate) send: u32,
    pub(crate) recv: u32,
    pub(crate) max_inline: u32,
}

impl Qp {
    fn create(
        pd: &Pd,
        cq: &Cq,
        srq: Option<&Srq>,
        qp_type: u32,
        sizes: QpSizes,
    ) -> io::Result<Self> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq.raw,
            recv_cq: cq.raw,
            srq: srq.map_or(ptr::null_mut(), |s| s.raw),
            cap: ibv_qp_cap {
                max_send_wr: sizes.send,
                max_recv_wr: if srq.is_some() { 0 } else { sizes.recv },
                // Inline sends gather the fragment header, the message
                // header and the payload.
                max_send_sge: 3,
                max_recv_sge: 1,
                max_inline_data: sizes.max_inline,
            },
            qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: the domain and queues are live; `init` is valid for the
        // call and receives the capabilities granted.
        let raw = unsafe { (verbs_of(pd).ibv_create_qp)(pd.raw, &mut init) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a non-null answer is a live ibv_qp.
        let qpn = unsafe { (*raw).qp_num };
        Ok(Self {
            verbs: Arc::clone(verbs_of(pd)),
            raw,
            qpn,
            max_inline: init.cap.max_inline_data,
        })
    }

    fn modify(&self, attr: &mut ibv_qp_attr, mask: c_int, step: &'static str) -> io::Result<()> {
        // SAFETY: the queue pair is live; `attr` is valid for the call.
        let rc = unsafe { (self.verbs.ibv_modify_qp)(self.raw, attr, mask) };
        if rc == 0 {
            Ok(())
        } else {
            let e = rc_error(rc);
            Err(io::Error::new(e.kind(), format!("{step}: {e}")))
        }
    }

    /// A reliable-connected queue pair on the shared receive queue, moved
    /// to INIT (RDMA read and write allowed to the peer).
    pub(crate) fn new_rc(
        pd: &Pd,
        cq: &Cq,
        srq: &Srq,
        port: u8,
        sizes: QpSizes,
    ) -> io::Result<Self> {
        let qp = Self::create(pd, cq, Some(srq), IBV_QPT_RC, sizes)?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: (IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ) as u32,
            ..Default::default()
        };
        qp.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            "RC queue pair to INIT",
        )?;
        Ok(qp)
    }

    /// Connects a reliable queue pair in INIT to the peer's queue pair
    /// `remote_qpn`: to RTR (receiving from it) then RTS (sending to it).
    pub(crate) fn connect_rc(
        &self,
        local: &VerbsAddress,
        port: &PortInfo,
        peer: &VerbsAddress,
        remote_qpn: u32,
        params: PathParams,
    ) -> io::Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: u32::from(local.mtu.min(peer.mtu)),
            dest_qp_num: remote_qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: port.max_qp_rd_atom,
            min_rnr_timer: MIN_RNR_TIMER,
            ah_attr: ah_attr(local, peer, params),
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            "RC queue pair to RTR",
        )?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            sq_psn: local.psn,
            timeout: params.timeout,
            retry_cnt: params.retry_count,
            rnr_retry: RNR_RETRY_FOREVER,
            max_rd_atomic: port.max_qp_rd_atom,
            ..Default::default()
        };
        self.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            "RC queue pair to RTS",
        )
    }

    /// The datagram queue pair, made ready to send and receive.
    pub(crate) fn new_ud(
        pd: &Pd,
        cq: &Cq,
        port: u8,
        qkey: u32,
        psn: u32,
        sizes: QpSizes,
    ) -> io::Result<Self> {
        let qp = Self::create(pd, cq, None, IBV_QPT_UD, sizes)?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qkey,
            ..Default::default()
        };
        qp.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
            "UD queue pair to INIT",
        )?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            ..Default::default()
        };
        qp.modify(&mut a, IBV_QP_STATE, "UD queue pair to RTR")?;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            sq_psn: psn,
            ..Default::default()
        };
        qp.modify(&mut a, IBV_QP_STATE | IBV_QP_SQ_PSN, "UD queue pair to RTS")?;
        Ok(qp)
    }

    /// Moves the queue pair to the error state, so the device flushes
    /// every request still posted (each reports a completion).
    pub(crate) fn to_error(&self) -> io::Result<()> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, IBV_QP_STATE, "queue pair to ERR")
    }

    /// Posts one send request.
    ///
    /// # Safety
    ///
    /// As [`crate::ffi::post_send`]: `wr`'s scatter list and the memory it
    /// names stay valid until completion (for an inline send, for the
    /// call), and any remote address and key were checked by the caller.
    pub(crate) unsafe fn post_send(&self, wr: &mut ibv_send_wr) -> io::Result<()> {
        // SAFETY: the queue pair is live; the caller vouches for `wr`.
        unsafe { crate::ffi::post_send(self.raw, wr) }
    }

    /// Posts one receive buffer (datagram queue pair only).
    ///
    /// # Safety
    ///
    /// `sge` names registered memory left alone until its completion.
    pub(crate) unsafe fn post_recv(&self, wr_id: u64, mut sge: ibv_sge) -> io::Result<()> {
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: the queue pair is live; the caller vouches for `sge`.
        unsafe { crate::ffi::post_recv(self.raw, &mut wr) }
    }
}

fn verbs_of(pd: &Pd) -> &Arc<Verbs> {
    pd.verbs()
}

/// The route from `local`'s port to `peer`'s: by LID inside an InfiniBand
/// subnet, with a global route header (the peer's GID) on Ethernet and
/// across subnets.
pub(crate) fn ah_attr(
    local: &VerbsAddress,
    peer: &VerbsAddress,
    params: PathParams,
) -> ibv_ah_attr {
    let global = local.needs_global_route(peer);
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: peer.gid },
            flow_label: 0,
            sgid_index: local.gid_index,
            hop_limit: if global { HOP_LIMIT } else { 0 },
            traffic_class: params.traffic_class,
        },
        dlid: peer.lid,
        sl: params.service_level,
        src_path_bits: 0,
        static_rate: 0,
        is_global: u8::from(global),
        port_num: local.port,
    }
}
