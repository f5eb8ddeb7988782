//! What the host's in-process tests share: a runtime's own key-value
//! exchange for a job of one, and messengers over the `self` transport.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt;

use fireopal::bootstrap::Exchange;
use fireopal::btl::Messenger;
use fireopal::plugin::{Options, Registry};

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
