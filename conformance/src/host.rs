//! The host a module sees in the transport suite: parameters from the
//! suite's [`Setup`](crate::Setup), one rank's job facts, and a log kept
//! for the case to read.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use abi_stable::std_types::{ROption, RStr};
use fireopal_abi::host::{Host, HostServices, JobInfo, LogLevel, JOB_KEY_LEN};
use fireopal_abi::param::ParamValue;

/// Environment variable that makes every test host print its log lines.
pub const LOG_ENV: &str = "FIREOPAL_CONFORMANCE_LOG";

/// Log lines a module wrote through its host, in order.
pub type Logs = Arc<Mutex<Vec<(LogLevel, String)>>>;

/// Host services of one rank of a job in this process.
#[derive(Clone, Debug)]
pub struct TestHost {
    params: Arc<HashMap<String, ParamValue>>,
    job: JobInfo,
    logs: Logs,
}

impl TestHost {
    /// A host for `job` that answers `params` and nothing else (a
    /// component falls back to its defaults for the rest).
    pub fn new(job: JobInfo, params: &[(String, ParamValue)]) -> Self {
        Self {
            params: Arc::new(params.iter().cloned().collect()),
            job,
            logs: Logs::default(),
        }
    }

    /// The lines logged so far, shared with the host.
    pub fn logs(&self) -> Logs {
        Arc::clone(&self.logs)
    }

    /// The host as a plugin receives it.
    pub fn into_host(self) -> Host {
        Host::from_impl(self)
    }
}

impl HostServices for TestHost {
    fn param(&self, name: RStr<'_>) -> ROption<ParamValue> {
        self.params.get(name.as_str()).cloned().into()
    }

    fn job(&self) -> JobInfo {
        self.job
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        if std::env::var_os(LOG_ENV).is_some() {
            eprintln!("[rank {} {level:?}] {message}", self.job.rank);
        }
        // A poisoned log only means another thread of the test panicked.
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        logs.push((level, message.as_str().to_owned()));
    }
}

/// A job key no other job of this process (or, with overwhelming
/// likelihood, of this machine) uses, so that concurrent tests never
/// reach each other's modules.
pub fn fresh_job_key() -> [u8; JOB_KEY_LEN] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut key = [0u8; JOB_KEY_LEN];
    for (i, chunk) in key.chunks_mut(8).enumerate() {
        // Each `RandomState` is seeded from the operating system's
        // randomness; hashing the counter and process id mixes them in.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u32(std::process::id());
        h.write_usize(i);
        let word = h.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    key
}
