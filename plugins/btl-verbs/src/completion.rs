//! What a work completion's status means for the operation and for the
//! connection, as the BTL reports it ([`PluginError`] and its
//! [`ErrorKind`]).
//!
//! On a reliable connection any error moves the queue pair to the error
//! state: the request that failed reports its cause, and every request
//! behind it is flushed (`IBV_WC_WR_FLUSH_ERR`). So a status other than
//! success fails the operation, and the first one that is not a flush also
//! fails the peer, once, with the kind that names why.

use fireopal_abi::{ErrorKind, PluginError};

/// `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: u32 = 0;
/// `IBV_WC_WR_FLUSH_ERR`.
pub const WC_WR_FLUSH_ERR: u32 = 5;

/// The header's name of each status, by value.
const NAMES: [&str; 24] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_TM_ERR",
    "IBV_WC_TM_RNDV_INCOMPLETE",
];

/// The header's name of `status`, or `None` for a value it does not
/// declare.
pub fn status_name(status: u32) -> Option<&'static str> {
    NAMES.get(usize::try_from(status).ok()?).copied()
}

/// What one completion means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The operation succeeded.
    Success,
    /// The operation failed because the connection had already broken;
    /// its peer was failed by an earlier completion.
    Flushed(PluginError),
    /// The operation failed and broke the connection: report the error
    /// for it and fail the peer with it.
    Failed(PluginError),
}

impl Outcome {
    /// The operation's result.
    pub fn result(&self) -> Result<(), PluginError> {
        match self {
            Self::Success => Ok(()),
            Self::Flushed(e) | Self::Failed(e) => Err(e.clone()),
        }
    }

    /// The error the peer fails with, if this completion breaks it: the
    /// operation's, with a kind that reports a failed peer (a local cause
    /// becomes [`ErrorKind::PEER_FAILED`], as the connection is gone all
    /// the same).
    pub fn peer_failure(&self) -> Option<PluginError> {
        match self {
            Self::Failed(e) if e.kind.is_peer_failure() => Some(e.clone()),
            Self::Failed(e) => Some(PluginError::new(ErrorKind::PEER_FAILED, e.message.as_str())),
            _ => None,
        }
    }
}

/// The error kind a failing status reports.
pub fn kind_of(status: u32) -> ErrorKind {
    match status {
        // The peer's side did not answer: lost link, dead node, or a
        // receiver that never reposted buffers.
        12 | 13 | 20 => ErrorKind::TIMED_OUT,
        // The peer's side refused the request: a key, range or right the
        // initiator's checks should have caught, or bytes it cannot take.
        9 | 10 | 11 | 15 => ErrorKind::PEER_FAILED,
        // The peer's side went away mid-request.
        16 => ErrorKind::CONNECTION_RESET,
        // Local: a request or buffer this process described wrongly.
        1 | 2 | 4 | 6 | 8 => ErrorKind::INVALID_ARGUMENT,
        WC_WR_FLUSH_ERR => ErrorKind::CONNECTION_RESET,
        7 => ErrorKind::MALFORMED,
        19 | 21 => ErrorKind::IO,
        _ => ErrorKind::OTHER,
    }
}

/// Classifies a completion's `status` (with the device's `vendor_err`)
/// for the peer `rank`.
pub fn classify(status: u32, vendor_err: u32, rank: u32) -> Outcome {
    if status == WC_SUCCESS {
        return Outcome::Success;
    }
    let name = status_name(status).unwrap_or("unknown status");
    let message =
        format!("verbs completion to rank {rank}: {name} ({status}, vendor error {vendor_err:#x})");
    let error = PluginError::new(kind_of(status), message);
    if status == WC_WR_FLUSH_ERR {
        Outcome::Flushed(error)
    } else {
        Outcome::Failed(error)
    }
}
