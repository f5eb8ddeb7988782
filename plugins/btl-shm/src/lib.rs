//! `shm`: the shared-memory byte transfer layer of fireopal, for the
//! processes of a job that share a node.
//!
//! # Segments
//!
//! Each process makes one *queue segment* with `memfd_create` (nothing is
//! named in `/dev/shm`, so nothing can leak or collide), sealed so that its
//! size never changes. Its published address carries its pid and the
//! segment's descriptor number; a peer fetches the descriptor with
//! `pidfd_getfd` (or, failing that, by opening `/proc/<pid>/fd/<n>`, which
//! needs only read access to the process), checks the inode number, size
//! and seals, maps it, and checks the header: magic, layout, owner, and a
//! SipHash tag keyed by the job key, so only a member of the job could
//! have made it. The file is never reachable by another user.
//!
//! The layout ([`fireopal_core::shmq::layout`]) holds, for each sender on
//! the node, a *fast box* (a single-writer ring of cache lines for the
//! smallest messages; header word written last, behind a release store)
//! and one lock-free multi-writer *receive queue* (a bounded ring of
//! slots claimed by compare-and-swap). Every fragment carries a per-pair
//! sequence number, so order per peer holds across both paths: the reader
//! takes fast-box entries while their number is the next one, and a queue
//! fragment ahead of them first drains the fast box up to its number.
//!
//! # Paths by size
//!
//! - `sendi` up to a fast-box entry ([`BtlAttributes::max_sendi_size`]):
//!   one cache line for 8 bytes, no system call, lock or allocation; when
//!   the fast box is full it tries a queue slot, and answers `Busy` when
//!   neither has room or sends to that peer are queued.
//! - `send` up to the eager limit: one fragment (fast box or queue slot);
//!   queued in this process, in order, when neither has room.
//! - larger `send`s: *rendezvous*. The payload is copied into a staging
//!   segment (the `send` contract lets the caller reuse its buffer at
//!   once), a small request describes it (segment id, offset, length), the
//!   receiver maps the staging segment once (cached) and hands the bytes
//!   to the host straight from the mapping, then tells the sender it is
//!   done: the send's completion fires then, exactly once.
//! - [`ShmTransport::send_in_place`] skips the staging copy when the
//!   caller keeps the payload until completion: memory of a
//!   [`TransferBuffer`] (a memfd segment) is read by the receiver after
//!   mapping it once; other memory with `process_vm_readv` when the
//!   receiver said it may (each process probes its peers at `add_peers`
//!   and publishes the answer in its segment); otherwise it is staged. A
//!   receiver that cannot read an in-place payload after all answers so,
//!   and the sender stages it then.
//! - `min_rdma_pipeline_size` (`btl_shm_min_rdma_pipeline_size`: the
//!   eager limit on Intel processors, elsewhere 128 KiB or the eager
//!   limit if larger) tells a point-to-point layer from which size the
//!   receiver is to read a message with `get`; below it, fragments of the
//!   eager limit through the queue are faster.
//! - Memory files of the host (the symmetric heap's memfd) join the
//!   transfer buffers through [`ShmTransport::register_segment`]: payloads
//!   and registrations inside them take the same mapped path. The file
//!   must be sealed against resizing, as every segment is.
//! - `put`/`get` on registered memory: one `memcpy` through a cached
//!   mapping when the memory is in a transfer buffer or a registered
//!   segment, `process_vm_readv` / `writev` when permitted, otherwise
//!   emulated with fragments through the queues (the target moves the
//!   bytes when it progresses).
//!
//! Mappings of peers' segments live in a
//! [`RegCache`](fireopal_core::regcache::RegCache) until their owner says
//! it unmapped them (a notice sent to every peer when a transfer buffer or
//! a dedicated staging segment goes away, or a registered segment is
//! unregistered).
//!
//! # Failures
//!
//! A peer whose process exits is noticed through its pidfd and reported
//! failed, and the work that waits for it (queued fragments, rendezvous,
//! emulated RDMA) fails, each completion once. While such work waits, the
//! peers are checked every 1024 `progress` calls; while none does, every
//! quarter of a second, so a process that only receives hears of it too.
//!
//! # Corruption
//!
//! Every word read from shared memory is checked (kind, lengths, offsets
//! inside the segment, sequence numbers); a corrupt fragment is reported
//! for the peer that wrote it through `EventSink::peer_failed`, and the
//! peer is not read again. Nothing read from a peer is trusted for an
//! offset or length without a check, and every segment is sealed, so no
//! access can leave a mapping.
//!
//! Payload bytes have no such structure to check. As a debugging aid,
//! `btl_shm_checksum=yes` puts a Fletcher-64 checksum on every fragment
//! and every rendezvous payload a process writes for a peer
//! ([`fireopal_core::shmq::sum`]); the reader checks it before it hands
//! anything over, and a difference is reported like a corrupt fragment
//! (and counted in [`Counters::checksum_errors`]). Peers that disagree on
//! the parameter do not reach each other. RDMA through a mapping or
//! process_vm_readv/writev copies straight between the two processes'
//! own memory, with no shared copy in between to check.

#![deny(unsafe_code)]

mod buffer;
mod mapcache;
mod mem;
mod queue;
mod sys;
mod transport;

use fireopal_abi::btl::{BtlAttributes, BtlComponentImpl};
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::{Availability, ComponentVersion, PluginError};

pub use buffer::TransferBuffer;
pub use transport::{Counters, ShmTransport};

/// Parameter: priority answered by `query`.
pub const PARAM_PRIORITY: &str = "btl_shm_priority";
/// Parameter: largest payload of one eager fragment.
pub const PARAM_EAGER_LIMIT: &str = "btl_shm_eager_limit";
/// Parameter: bytes of each fast-box ring.
pub const PARAM_FBOX_SIZE: &str = "btl_shm_fbox_size";
/// Parameter: largest fast-box entry, header word included.
pub const PARAM_FBOX_MAX: &str = "btl_shm_fbox_max";
/// Parameter: slots of the receive queue.
pub const PARAM_FIFO_SLOTS: &str = "btl_shm_fifo_slots";
/// Parameter: largest message `send` takes.
pub const PARAM_MAX_SEND: &str = "btl_shm_max_send_size";
/// Parameter: smallest rendezvous message the receiver reads (`get`).
pub const PARAM_RDMA_MIN: &str = "btl_shm_min_rdma_pipeline_size";
/// Parameter: bytes of each staging segment.
pub const PARAM_STAGING_CHUNK: &str = "btl_shm_staging_chunk";
/// Parameter: most bytes of staging segments.
pub const PARAM_STAGING_LIMIT: &str = "btl_shm_staging_limit";
/// Parameter: single-copy mechanisms allowed.
pub const PARAM_SINGLE_COPY: &str = "btl_shm_single_copy";
/// Parameter: most cached mappings of peers' segments.
pub const PARAM_MAP_CACHE: &str = "btl_shm_map_cache_max";
/// Parameter: checksums on what is written into shared memory.
pub const PARAM_CHECKSUM: &str = "btl_shm_checksum";

/// Which single-copy mechanisms may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleCopy {
    /// Mapping peers' memfd segments and cross-memory reads.
    Auto,
    /// Mapping peers' memfd segments only.
    Memfd,
    /// Cross-memory reads only.
    Cma,
    /// Neither: everything is copied through staging or the queues.
    None,
}

impl SingleCopy {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "auto" => Self::Auto,
            "memfd" => Self::Memfd,
            "cma" => Self::Cma,
            "none" => Self::None,
            _ => return None,
        })
    }

    /// Whether peers' memfd segments may be mapped for user data.
    pub fn memfd(self) -> bool {
        matches!(self, Self::Auto | Self::Memfd)
    }

    /// Whether cross-memory reads may be used.
    pub fn cma(self) -> bool {
        matches!(self, Self::Auto | Self::Cma)
    }
}

/// Settings of a module, from the component's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest payload of one eager fragment.
    pub eager_limit: usize,
    /// Bytes of each fast-box ring; 0 sizes them by the number of
    /// processes on the node ([`Config::fbox_bytes`]).
    pub fbox_size: usize,
    /// Largest fast-box entry, header word included.
    pub fbox_max: usize,
    /// Receive-queue slots.
    pub fifo_slots: u32,
    /// Largest message `send` takes.
    pub max_send: u64,
    /// Smallest rendezvous message the receiver reads with `get`
    /// (reported as `min_rdma_pipeline_size`); a point-to-point layer
    /// sends smaller ones as eager-sized fragments through the queue. 0:
    /// chosen by the processor ([`Config::rdma_min`]).
    pub rdma_min: u64,
    /// Whether, with `rdma_min` 0, the receiver reads every message above
    /// the eager limit: on processors whose `process_vm_readv` overtakes
    /// the queue's fragments there (Intel's; [`reads_early`]).
    pub reads_early: bool,
    /// Bytes of each staging segment.
    pub staging_chunk: usize,
    /// Most bytes of staging segments.
    pub staging_limit: usize,
    /// Single-copy mechanisms allowed.
    pub single_copy: SingleCopy,
    /// Most cached mappings of peers' segments.
    pub map_cache_max: usize,
    /// Whether fragments and rendezvous payloads carry checksums.
    pub checksum: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            // Two copies through a queue slot beat a rendezvous up to
            // here: on Zen 3, 16 and 32 KiB messages took less than half
            // the time of the handshake and the process_vm_readv (32 KiB
            // the same time when lines move slowly between cores); at
            // 64 KiB the rendezvous is ahead. Each process's queue is
            // `fifo_slots` slots of this size (4 MiB).
            eager_limit: 32 << 10,
            fbox_size: 0,
            fbox_max: 2048,
            fifo_slots: 128,
            max_send: 1 << 30,
            rdma_min: 0,
            reads_early: false,
            staging_chunk: 16 << 20,
            staging_limit: 256 << 20,
            single_copy: SingleCopy::Auto,
            map_cache_max: 1024,
            checksum: false,
        }
    }
}

/// Whether this processor's `process_vm_readv` overtakes fragments
/// through the queue from the eager limit on: Intel's, as measured (see
/// [`Config::RDMA_MIN`]); AMD's Zen 3 not below 128 KiB. Others are
/// taken as Zen 3.
pub fn reads_early() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .find(|l| l.starts_with("vendor_id"))
            .is_some_and(|l| l.ends_with("GenuineIntel"))
    })
}

impl Config {
    /// Smallest rendezvous message the receiver reads when
    /// `btl_shm_min_rdma_pipeline_size` is 0, the eager limit is less and
    /// the processor does not read early.
    // Above the eager limit and under this, fragments through the queue
    // (two copies, pipelined: the receiver copies one out while the
    // sender copies the next in) beat the receiver's process_vm_readv
    // after a handshake on Zen 3: 64 KiB took 5.4-6.0 against 9.5-11.5
    // us. From 128 KiB, messages sent both ways at once fill the queues
    // and lose; at 4 MiB one way loses too. On Intel the read wins from
    // the eager limit (64 KiB 4.8-5.6 us against fragments' 5.7-8.5).
    pub const RDMA_MIN: u64 = 128 << 10;

    /// Smallest rendezvous message the receiver reads: the parameter,
    /// else the eager limit where the processor reads early, else
    /// [`RDMA_MIN`](Self::RDMA_MIN) or the eager limit, the larger.
    pub fn rdma_min(&self) -> u64 {
        match self.rdma_min {
            0 if self.reads_early => self.eager_limit as u64,
            0 => Self::RDMA_MIN.max(self.eager_limit as u64),
            n => n,
        }
    }

    /// Fast boxes of a process take at most this much when sized
    /// automatically.
    pub const FBOX_BUDGET: usize = 1 << 20;
    /// Smallest automatically sized fast-box ring.
    pub const FBOX_MIN_AUTO: usize = 8 << 10;
    /// Largest automatically sized fast-box ring.
    pub const FBOX_MAX_AUTO: usize = 32 << 10;

    /// Bytes of each fast-box ring on a node of `local_size` processes:
    /// the parameter when set, otherwise the largest power of two between
    /// [`FBOX_MIN_AUTO`](Self::FBOX_MIN_AUTO) and
    /// [`FBOX_MAX_AUTO`](Self::FBOX_MAX_AUTO) whose rings (one per process
    /// of the node) fit in [`FBOX_BUDGET`](Self::FBOX_BUDGET).
    ///
    /// A ring holds what a sender may have in flight before it falls back
    /// to the shared queue: with 1 KiB messages an 8 KiB ring takes seven,
    /// and the stream ran at 2.2 GB/s where a 32 KiB ring reached 3.6.
    pub fn fbox_bytes(&self, local_size: u32) -> usize {
        if self.fbox_size != 0 {
            return self.fbox_size;
        }
        let share = Self::FBOX_BUDGET / (local_size.max(1) as usize);
        let pow2 = share.checked_ilog2().map_or(0, |b| 1 << b);
        pow2.clamp(Self::FBOX_MIN_AUTO, Self::FBOX_MAX_AUTO)
    }

    /// Largest header plus payload of a `sendi`: a fast-box entry, less
    /// its header word and, with checksums, their trailer.
    pub fn sendi_max(&self) -> usize {
        let trailer = if self.checksum {
            fireopal_core::shmq::sum::TRAILER
        } else {
            0
        };
        self.fbox_max.saturating_sub(8 + trailer)
    }

    /// Reads the parameters from the host (defaults for those it lacks).
    pub fn from_host(host: &Host) -> Result<Config, PluginError> {
        let d = Config::default();
        let size = |name: &str, default: usize| -> Result<usize, PluginError> {
            match host.param_u64(name) {
                None => Ok(default),
                Some(v) => usize::try_from(v)
                    .map_err(|_| PluginError::invalid(format!("{name} = {v} is too large"))),
            }
        };
        let single_copy = match host.param_str(PARAM_SINGLE_COPY) {
            None => d.single_copy,
            Some(s) => SingleCopy::parse(&s).ok_or_else(|| {
                PluginError::invalid(format!(
                    "{PARAM_SINGLE_COPY} = {s:?}: expected auto, memfd, cma or none"
                ))
            })?,
        };
        let fifo_slots = host
            .param_u64(PARAM_FIFO_SLOTS)
            .unwrap_or(u64::from(d.fifo_slots));
        let cfg = Config {
            eager_limit: size(PARAM_EAGER_LIMIT, d.eager_limit)?,
            fbox_size: size(PARAM_FBOX_SIZE, d.fbox_size)?,
            fbox_max: size(PARAM_FBOX_MAX, d.fbox_max)?,
            fifo_slots: u32::try_from(fifo_slots).map_err(|_| {
                PluginError::invalid(format!("{PARAM_FIFO_SLOTS} = {fifo_slots} is too large"))
            })?,
            max_send: host.param_u64(PARAM_MAX_SEND).unwrap_or(d.max_send),
            rdma_min: host.param_u64(PARAM_RDMA_MIN).unwrap_or(d.rdma_min),
            reads_early: reads_early(),
            staging_chunk: size(PARAM_STAGING_CHUNK, d.staging_chunk)?,
            staging_limit: size(PARAM_STAGING_LIMIT, d.staging_limit)?,
            single_copy,
            map_cache_max: size(PARAM_MAP_CACHE, d.map_cache_max)?,
            checksum: host.param_bool(PARAM_CHECKSUM).unwrap_or(d.checksum),
        };
        if cfg.eager_limit < 1024 || cfg.eager_limit > 8 << 20 {
            return Err(PluginError::invalid(format!(
                "{PARAM_EAGER_LIMIT} must be between 1 KiB and 8 MiB"
            )));
        }
        // The layout's bounds, checked here so that the error names the
        // parameter.
        use fireopal_core::shmq::{layout, LINE};
        if !(LINE..=layout::MAX_FBOX_ENTRY as usize).contains(&cfg.fbox_max) {
            return Err(PluginError::invalid(format!(
                "{PARAM_FBOX_MAX} = {}: must be between {LINE} and {} bytes",
                cfg.fbox_max,
                layout::MAX_FBOX_ENTRY
            )));
        }
        if cfg.fbox_size > layout::MAX_FBOX_BYTES as usize {
            return Err(PluginError::invalid(format!(
                "{PARAM_FBOX_SIZE} = {}: must be at most {} bytes (0: sized by the node)",
                cfg.fbox_size,
                layout::MAX_FBOX_BYTES
            )));
        }
        if !cfg.fifo_slots.is_power_of_two()
            || !(2..=layout::MAX_FIFO_SLOTS).contains(&cfg.fifo_slots)
        {
            return Err(PluginError::invalid(format!(
                "{PARAM_FIFO_SLOTS} = {}: must be a power of two from 2 to {}",
                cfg.fifo_slots,
                layout::MAX_FIFO_SLOTS
            )));
        }
        if cfg.max_send < cfg.eager_limit as u64 {
            return Err(PluginError::invalid(format!(
                "{PARAM_MAX_SEND} must be at least {PARAM_EAGER_LIMIT}"
            )));
        }
        if cfg.rdma_min != 0 && cfg.rdma_min < cfg.eager_limit as u64 {
            return Err(PluginError::invalid(format!(
                "{PARAM_RDMA_MIN} = {}: must be at least {PARAM_EAGER_LIMIT} ({})",
                cfg.rdma_min, cfg.eager_limit
            )));
        }
        Ok(cfg)
    }
}

/// The `shm` component.
#[derive(Debug)]
pub struct ShmComponent;

impl BtlComponentImpl for ShmComponent {
    const NAME: &'static str = "shm";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = ShmTransport;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        let d = Config::default();
        let params: [(&str, ParamValue, &str); 12] = [
            (PARAM_PRIORITY, ParamValue::UInt(80), "priority of the shared-memory transport"),
            (
                PARAM_EAGER_LIMIT,
                ParamValue::Size(d.eager_limit as u64),
                "largest payload sent in one fragment; larger sends use rendezvous",
            ),
            (
                PARAM_FBOX_SIZE,
                ParamValue::Size(d.fbox_size as u64),
                "bytes of each per-peer fast-box ring (0: 32 KiB, less on nodes of more than 32 processes so that a process's rings take at most 1 MiB, and at least 8 KiB)",
            ),
            (
                PARAM_FBOX_MAX,
                ParamValue::Size(d.fbox_max as u64),
                "largest fast-box entry in bytes (header word included); sendi takes up to this less 8",
            ),
            (
                PARAM_FIFO_SLOTS,
                ParamValue::UInt(u64::from(d.fifo_slots)),
                "slots of each process's receive queue (a power of two)",
            ),
            (
                PARAM_MAX_SEND,
                ParamValue::Size(d.max_send),
                "largest message one send takes",
            ),
            (
                PARAM_RDMA_MIN,
                ParamValue::Size(d.rdma_min),
                "smallest rendezvous message the receiver reads from the sender's memory (0: the eager limit on Intel processors, elsewhere 128 KiB or the eager limit if larger); the point-to-point layer sends smaller ones as fragments of the eager limit through the receive queue",
            ),
            (
                PARAM_STAGING_CHUNK,
                ParamValue::Size(d.staging_chunk as u64),
                "bytes of each staging segment of rendezvous sends",
            ),
            (
                PARAM_STAGING_LIMIT,
                ParamValue::Size(d.staging_limit as u64),
                "most bytes of staging segments; past it large sends wait in this process",
            ),
            (
                PARAM_SINGLE_COPY,
                ParamValue::Str("auto".into()),
                "single-copy mechanisms: auto (memfd mappings and process_vm_readv), memfd, cma, none",
            ),
            (
                PARAM_MAP_CACHE,
                ParamValue::UInt(d.map_cache_max as u64),
                "most cached mappings of peers' segments",
            ),
            (
                PARAM_CHECKSUM,
                ParamValue::Bool(d.checksum),
                "check every fragment and rendezvous payload written into shared memory with a Fletcher-64 checksum; a mismatch fails the peer that wrote it (a debugging aid, at a cost in speed; must be equal on every rank)",
            ),
        ];
        for (name, default, help) in params {
            registry.register(name, default, help)?;
        }
        Ok(())
    }

    fn query(host: &Host) -> Availability {
        let job = host.job();
        if job.local_size < 2 {
            return Availability::Unavailable {
                reason: "no other process of the job on this node".into(),
            };
        }
        if let Err(e) = sys::memfd(c"fireopal-shm-probe", fireopal_core::shmq::layout::PAGE) {
            return Availability::Unavailable {
                reason: format!("cannot make a sealed memfd segment: {e}").into(),
            };
        }
        let priority = match host.priority(PARAM_PRIORITY, 80) {
            Ok(p) => p,
            Err(unavailable) => return unavailable,
        };
        // The single-copy paths, as `fireopal info` shows them.
        let wanted = host
            .param_str(PARAM_SINGLE_COPY)
            .unwrap_or_else(|| "auto".into());
        let cma = match wanted.as_str() {
            "none" | "memfd" => format!("off (disabled by {PARAM_SINGLE_COPY})"),
            _ => match transport::probe_cma_siblings() {
                Ok(()) => "on".into(),
                Err(why) => format!("declined ({why})"),
            },
        };
        let memfd = if matches!(wanted.as_str(), "none" | "cma") {
            "off"
        } else {
            "on"
        };
        let note = format!("single copy: memfd mappings {memfd}, process_vm_readv {cma}");
        Availability::AvailableWithNote {
            priority,
            note: note.into(),
        }
    }

    fn open(host: Host) -> Result<Vec<ShmTransport>, PluginError> {
        let cfg = Config::from_host(&host)?;
        let module = ShmTransport::new(host.clone(), cfg)?;
        host.log(
            LogLevel::Info,
            &format!("shm: single copy: {}", module.single_copy_status()),
        );
        if cfg.checksum {
            host.log(
                LogLevel::Info,
                &format!("shm: fragments and payloads carry checksums ({PARAM_CHECKSUM})"),
            );
        }
        Ok(vec![module])
    }
}

/// The attributes every module of this build reports for `cfg`.
fn attributes(cfg: &Config) -> BtlAttributes {
    use fireopal_abi::btl::{exclusivity, BtlFlags};
    BtlAttributes {
        max_sendi_size: cfg.sendi_max() as u64,
        eager_limit: cfg.eager_limit as u64,
        max_send_size: cfg.max_send,
        max_header_size: u32::from(u8::MAX),
        rdma_pipeline_send_length: cfg.eager_limit as u64,
        rdma_pipeline_frag_size: u64::MAX,
        min_rdma_pipeline_size: cfg.rdma_min(),
        exclusivity: exclusivity::SHARED_MEMORY,
        latency_ns: 150,
        bandwidth_mbps: 20_000,
        flags: BtlFlags::SEND
            | BtlFlags::PUT
            | BtlFlags::GET
            | BtlFlags::SEND_IN_PLACE
            | BtlFlags::TRANSFER_BUFFERS
            | BtlFlags::MAPPED_SEGMENTS
            | BtlFlags::INITIATOR_COPIES,
        registration_handle_size: fireopal_core::wire::shm::REMOTE_KEY_LEN as u32,
    }
}

fireopal_abi::export_btl_component!(ShmComponent);

#[cfg(test)]
mod tests {
    use super::{attributes, Config};

    #[test]
    fn fast_boxes_are_sized_by_the_node_unless_set() {
        let auto = Config::default();
        let sized = |n| auto.fbox_bytes(n);
        assert_eq!(sized(2), 32 << 10);
        assert_eq!(sized(32), 32 << 10);
        assert_eq!(sized(33), 16 << 10);
        assert_eq!(sized(64), 16 << 10);
        assert_eq!(sized(128), 8 << 10);
        assert_eq!(sized(4096), 8 << 10, "never below the smallest ring");
        assert_eq!(sized(0), 32 << 10);
        let set = Config {
            fbox_size: 4096,
            ..Config::default()
        };
        assert_eq!(set.fbox_bytes(2), 4096);
    }

    #[test]
    fn the_read_threshold_is_the_parameter_else_at_least_the_eager_limit() {
        let d = Config::default();
        assert_eq!(d.rdma_min(), Config::RDMA_MIN);
        let early = Config {
            reads_early: true,
            ..Config::default()
        };
        assert_eq!(early.rdma_min(), early.eager_limit as u64);
        let early_set = Config {
            rdma_min: 64 << 10,
            ..early
        };
        assert_eq!(early_set.rdma_min(), 64 << 10, "the parameter wins");
        let large_eager = Config {
            eager_limit: 256 << 10,
            ..Config::default()
        };
        assert_eq!(
            large_eager.rdma_min(),
            256 << 10,
            "never under the eager limit"
        );
        let set = Config {
            rdma_min: 64 << 10,
            ..Config::default()
        };
        assert_eq!(set.rdma_min(), 64 << 10);
        assert_eq!(attributes(&set).min_rdma_pipeline_size, 64 << 10);
    }
}
