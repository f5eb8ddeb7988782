//! What the host's in-process tests share: a runtime's own key-value
//! exchange for a job of one, and messengers over the `self` transport.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt;

use fireopal::bootstrap::Exchange;
use fireopal::btl::{MemoryHandle, Messenger};
use fireopal::memory::MonitorKind;
use fireopal::plugin::{Options, Registry};
use fireopal_abi::btl::{Access, MemRegion};

/// A key-value exchange of one process, as a runtime with its own
/// launcher would write one.
#[derive(Default)]
pub(crate) struct OwnExchange {
    pub(crate) store: HashMap<String, Vec<u8>>,
    pub(crate) puts: usize,
    pub(crate) fences: usize,
}

#[derive(Debug)]
pub(crate) struct Missing(String);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no value under {}", self.0)
    }
}

impl std::error::Error for Missing {}

impl Exchange for OwnExchange {
    type Error = Missing;

    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        1
    }

    fn local_ranks(&self) -> &[u32] {
        &[0]
    }

    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Missing> {
        self.puts += 1;
        self.store.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn fence(&mut self) -> Result<(), Missing> {
        self.fences += 1;
        Ok(())
    }

    fn get(&mut self, _rank: u32, key: &str) -> Result<Vec<u8>, Missing> {
        self.store
            .get(key)
            .cloned()
            .ok_or_else(|| Missing(key.to_owned()))
    }
}

/// A registry with only the built-in `self` transport.
pub(crate) fn self_only() -> Registry {
    self_with(&[])
}

/// A registry with only the `self` transport and these `FIREOPAL_*`
/// settings.
pub(crate) fn self_with(settings: &[(&str, &str)]) -> Registry {
    Registry::open(&Options {
        environment: Some(
            std::iter::once(("FIREOPAL_BTL".to_owned(), "self".to_owned()))
                .chain(
                    settings
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
                )
                .collect(),
        ),
        ..Options::default()
    })
    .expect("the self transport is built in")
}

/// A messenger of a job of one over `registry`, and its exchange.
pub(crate) fn messenger(registry: &Registry) -> (Messenger, OwnExchange) {
    let mut exchange = OwnExchange::default();
    let m = Messenger::init(registry, &mut exchange).expect("init over the own exchange");
    (m, exchange)
}

/// `[addr, addr + len)` as a region a module may read.
#[allow(unsafe_code)]
fn unsafe_region(addr: usize, len: usize) -> MemRegion {
    // SAFETY: the callers' memory outlives every registration made of it.
    unsafe { MemRegion::new(addr as *mut u8, len) }
}

/// Registers `[addr, addr + len)` for rank 0's gets and releases it
/// again; returns the cache entry that served it.
pub(crate) fn register_and_release(m: &mut Messenger, addr: usize, len: usize) -> u64 {
    let handle: MemoryHandle = m
        .register_memory(0, unsafe_region(addr, len), Access::REMOTE_READ)
        .expect("register");
    let id = handle.cache_id().expect("a remote registration is cached");
    m.deregister_memory(handle).expect("deregister");
    id
}

pub(crate) fn with_monitor() -> (Registry, Messenger) {
    let registry = self_with(&[("FIREOPAL_MEMORY_MONITOR", "userfaultfd")]);
    let (m, _) = messenger(&registry);
    assert_eq!(m.memory_monitor().active, MonitorKind::Userfaultfd);
    (registry, m)
}

/// Skips (with the reason printed) where userfaultfd cannot run.
#[allow(unused_macros)]
macro_rules! monitor_or_skip {
    () => {{
        let registry = common::self_with(&[]);
        let (m, _) = common::messenger(&registry);
        if m.memory_monitor().active != fireopal::memory::MonitorKind::Userfaultfd {
            eprintln!("skipped: {}", m.memory_monitor());
            return;
        }
        drop(m);
        common::with_monitor()
    }};
}

#[allow(unused_imports)]
pub(crate) use monitor_or_skip;
