//! A recording backend shared by the registration cache tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use fireopal_core::regcache::{Access, Region, RegistrationBackend};

/// Why the test backend refused a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub Region);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused {:?}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Which registrations the backend refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Accept everything.
    Never,
    /// Refuse everything.
    Always,
    /// Refuse regions longer than this many bytes.
    LongerThan(usize),
}

/// Everything the backend saw.
#[derive(Debug)]
pub struct Log {
    pub next: u64,
    /// Live registrations by handle.
    pub live: BTreeMap<u64, (Region, Access)>,
    pub registered: u64,
    pub deregistered: u64,
    /// Deregistrations of handles that were not live (must stay empty).
    pub bad_deregistrations: Vec<u64>,
    pub fail: FailMode,
}

/// A backend that records every call; cheap to clone (shares the log).
#[derive(Debug, Clone)]
pub struct Recorder(pub Arc<Mutex<Log>>);

impl Recorder {
    pub fn new() -> Self {
        Recorder(Arc::new(Mutex::new(Log {
            next: 1,
            live: BTreeMap::new(),
            registered: 0,
            deregistered: 0,
            bad_deregistrations: Vec::new(),
            fail: FailMode::Never,
        })))
    }

    pub fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.0.lock().expect("log lock")
    }

    pub fn set_fail(&self, mode: FailMode) {
        self.log().fail = mode;
    }

    pub fn registered(&self) -> u64 {
        self.log().registered
    }

    pub fn deregistered(&self) -> u64 {
        self.log().deregistered
    }

    pub fn live_count(&self) -> usize {
        self.log().live.len()
    }

    pub fn is_live(&self, handle: u64) -> bool {
        self.log().live.contains_key(&handle)
    }
}

impl RegistrationBackend for Recorder {
    type Handle = u64;
    type Error = Refused;

    fn register(&self, region: Region, access: Access) -> Result<u64, Refused> {
        let mut log = self.log();
        let refuse = match log.fail {
            FailMode::Never => false,
            FailMode::Always => true,
            FailMode::LongerThan(n) => region.len() > n,
        };
        if refuse {
            return Err(Refused(region));
        }
        let h = log.next;
        log.next += 1;
        log.registered += 1;
        log.live.insert(h, (region, access));
        Ok(h)
    }

    fn deregister(&self, _region: Region, handle: &u64) {
        let mut log = self.log();
        if log.live.remove(handle).is_some() {
            log.deregistered += 1;
        } else {
            log.bad_deregistrations.push(*handle);
        }
    }
}
