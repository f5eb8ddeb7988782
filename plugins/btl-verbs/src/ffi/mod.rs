//! The C interface of libibverbs: structure layouts ([`types`]), the
//! exported functions opened with `dlopen` ([`library`]), and the data-path
//! calls that `<infiniband/verbs.h>` defines as static inline functions
//! through the context's ops table (below), which no library exports.

#![allow(unsafe_code)]

pub mod library;
pub mod types;

use std::ffi::c_int;
use std::io;

use types::*;

/// The error of a verbs call that returns an errno value (positive) or
/// -1 with `errno` set (older providers).
pub(crate) fn rc_error(rc: c_int) -> io::Error {
    if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    }
}

/// The outcome of a verbs call that returns 0 on success.
fn rc_result(rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(rc_error(rc))
    }
}

/// A data-path call the provider's ops table leaves empty.
fn no_op() -> io::Error {
    io::Error::from_raw_os_error(libc::EOPNOTSUPP)
}

/// `ibv_poll_cq`: up to `wc.len()` completions of `cq` into `wc`; how
/// many were written.
///
/// # Safety
///
/// `cq` must be a live completion queue made by `ibv_create_cq` on a
/// context that is still open.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> io::Result<usize> {
    let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
    // SAFETY: the caller guarantees `cq` and its context are live.
    let poll = unsafe { (*(*cq).context).ops.poll_cq };
    let Some(poll) = poll else {
        return Err(no_op());
    };
    // SAFETY: `wc` has room for `n` entries; `cq` is live.
    let rc = unsafe { poll(cq, n, wc.as_mut_ptr()) };
    usize::try_from(rc).map_err(|_| io::Error::other(format!("ibv_poll_cq failed ({rc})")))
}

/// `ibv_post_send`: posts the chain starting at `wr`.
///
/// # Safety
///
/// `qp` must be a live queue pair; `wr` and every request and scatter list
/// it chains to must be valid for the call, and the memory the lists name
/// must stay registered and untouched until the requests complete (or, for
/// inline sends, until the call returns).
pub(crate) unsafe fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> io::Result<()> {
    let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
    // SAFETY: the caller guarantees `qp` and its context are live.
    let post = unsafe { (*(*qp).context).ops.post_send };
    let Some(post) = post else {
        return Err(no_op());
    };
    // SAFETY: the caller's contract covers `wr` and its lists.
    rc_result(unsafe { post(qp, wr, &mut bad) })
}

/// `ibv_post_recv`: posts receive requests on a queue pair without a
/// shared receive queue (the datagram queue pair).
///
/// # Safety
///
/// `qp` must be live; `wr` and its lists valid for the call, and the
/// buffers they name registered and left alone until they complete.
pub(crate) unsafe fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> io::Result<()> {
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    // SAFETY: the caller guarantees `qp` and its context are live.
    let post = unsafe { (*(*qp).context).ops.post_recv };
    let Some(post) = post else {
        return Err(no_op());
    };
    // SAFETY: the caller's contract covers `wr` and its lists.
    rc_result(unsafe { post(qp, wr, &mut bad) })
}

/// `ibv_post_srq_recv`: posts receive requests on a shared receive queue.
///
/// # Safety
///
/// As [`post_recv`], for a live shared receive queue `srq`.
pub(crate) unsafe fn post_srq_recv(srq: *mut ibv_srq, wr: &mut ibv_recv_wr) -> io::Result<()> {
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    // SAFETY: the caller guarantees `srq` and its context are live.
    let post = unsafe { (*(*srq).context).ops.post_srq_recv };
    let Some(post) = post else {
        return Err(no_op());
    };
    // SAFETY: the caller's contract covers `wr` and its lists.
    rc_result(unsafe { post(srq, wr, &mut bad) })
}
