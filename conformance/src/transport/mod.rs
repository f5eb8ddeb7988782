//! The transport suite: the contract of [`fireopal_abi::btl::Transport`]
//! checked on modules of one component, all in this process.
//!
//! A plugin's tests instantiate it in one line,
//! [`transport_suite!`](crate::transport_suite), which makes one `#[test]`
//! per case. Each case opens a fresh job of [`Setup::size`] ranks and
//! checks one part of the contract on every pair of ranks that reach each
//! other, a rank and itself included when the module loops back:
//!
//! | case | what holds |
//! |---|---|
//! | `attributes` | limits consistent with each other and stable |
//! | `addresses` | one answer per peer; a malformed address is unreachable, never a crash |
//! | `sizes` | 0 B to 4 MiB arrive intact, in order, with headers up to the limit; completions exactly once |
//! | `limits` | oversized `send` or header is `INVALID_ARGUMENT`, oversized `sendi` is `Busy`, an unknown rank an error; nothing arrives |
//! | `sendi_order` | `sendi` and `send` mixed keep per-peer order; a `Busy` sends nothing |
//! | `many_small` | 10^5 small messages each way, none lost, duplicated or reordered |
//! | `all_to_all` | every rank sends to every rank at once; order per sender holds |
//! | `rdma` | `put`/`get` of 0 B to 4 MiB at odd offsets (with `PUT`/`GET`) |
//! | `rdma_checks` | bad keys, ranges and rights fail the operation and touch nothing |
//! | `in_place` | `send_in_place` delivers and completes once (with `SEND_IN_PLACE`) |
//! | `remove_peer` | pending sends to a removed peer complete once, with an error; later sends fail |
//!
//! A case the module does not offer the means for is *not applicable*, as
//! the contract allows; that passes.

use std::time::Instant;

use fireopal_abi::btl::BtlComponentImpl;

use crate::job::{Failure, Setup};
pub use crate::Outcome;

mod endpoints;
mod messages;
mod rdma;

/// One case of the suite, for component `C`.
pub type Case = fn(&Setup) -> Result<Outcome, Failure>;

/// Every case, by name, in the order [`run_all`] runs them.
pub fn cases<C: BtlComponentImpl>() -> Vec<(&'static str, Case)> {
    vec![
        ("attributes", endpoints::attributes::<C>),
        ("addresses", endpoints::addresses::<C>),
        ("sizes", messages::sizes::<C>),
        ("limits", messages::limits::<C>),
        ("sendi_order", messages::sendi_order::<C>),
        ("many_small", messages::many_small::<C>),
        ("all_to_all", messages::all_to_all::<C>),
        ("rdma", rdma::put_get::<C>),
        ("rdma_checks", rdma::checks::<C>),
        ("in_place", rdma::in_place::<C>),
        ("remove_peer", messages::remove_peer::<C>),
    ]
}

/// Runs case `name` on component `C`, and panics with the reason if it
/// fails: the body of each test [`transport_suite!`](crate::transport_suite)
/// makes.
pub fn run_case<C: BtlComponentImpl>(name: &str, setup: &Setup) {
    let Some((_, case)) = cases::<C>().into_iter().find(|(n, _)| *n == name) else {
        panic!("the transport suite has no case {name}");
    };
    let start = Instant::now();
    match case(setup) {
        Ok(Outcome::Passed) => {
            eprintln!("{} {name}: passed in {:.2?}", C::NAME, start.elapsed());
        }
        Ok(Outcome::NotApplicable(why)) => {
            eprintln!("{} {name}: not applicable: {why}", C::NAME);
        }
        Err(failure) => panic!(
            "btl {} fails the transport contract in case {name} ({} ranks): {failure}",
            C::NAME,
            setup.size()
        ),
    }
}

/// Runs every case on component `C`; each case's name and outcome.
pub fn run_all<C: BtlComponentImpl>(
    setup: &Setup,
) -> Vec<(&'static str, Result<Outcome, Failure>)> {
    cases::<C>()
        .into_iter()
        .map(|(name, case)| (name, case(setup)))
        .collect()
}

/// Instantiates the transport suite for a component: one `#[test]` per
/// case, named after it.
///
/// ```text
/// // tests/conformance.rs of a plugin crate
/// fireopal_conformance::transport_suite!(MyComponent, fireopal_conformance::Setup::ranks(2));
/// ```
#[macro_export]
macro_rules! transport_suite {
    ($component:ty, $setup:expr) => {
        $crate::__with_transport_cases! { __transport_tests ($component, $setup) }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_transport_cases {
    ($callback:ident ($($args:tt)*)) => {
        $crate::$callback! {
            $($args)* ; attributes, addresses, sizes, limits, sendi_order, many_small,
            all_to_all, rdma, rdma_checks, in_place, remove_peer
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __transport_tests {
    ($component:ty, $setup:expr ; $($case:ident),+) => {
        $(
            #[test]
            fn $case() {
                $crate::transport::run_case::<$component>(stringify!($case), &$setup);
            }
        )+
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __transport_case_names {
    (; $($case:ident),+) => {
        [$(stringify!($case)),+]
    };
}

#[cfg(test)]
mod tests {
    use fireopal_abi::btl::BtlComponentImpl;

    struct NoComponent;

    impl BtlComponentImpl for NoComponent {
        const NAME: &'static str = "none";
        const VERSION: fireopal_abi::ComponentVersion =
            fireopal_abi::ComponentVersion::new(0, 0, 0);
        type Module = crate::transport::tests::NoModule;
        fn query(_: &fireopal_abi::host::Host) -> fireopal_abi::Availability {
            fireopal_abi::Availability::Unavailable {
                reason: "none".into(),
            }
        }
        fn open(_: fireopal_abi::host::Host) -> Result<Vec<NoModule>, fireopal_abi::PluginError> {
            Ok(Vec::new())
        }
    }

    #[derive(Debug)]
    struct NoModule;

    impl fireopal_abi::btl::Transport for NoModule {
        fn attributes(
            &self,
        ) -> Result<fireopal_abi::btl::BtlAttributes, fireopal_abi::PluginError> {
            Err(fireopal_abi::PluginError::unsupported("attributes"))
        }
        fn address(&self) -> Result<Vec<u8>, fireopal_abi::PluginError> {
            Ok(Vec::new())
        }
        fn add_peers(
            &mut self,
            _: &[fireopal_abi::btl::PeerAddress<'_>],
        ) -> Result<Vec<fireopal_abi::btl::Reachability>, fireopal_abi::PluginError> {
            Ok(Vec::new())
        }
        fn sendi(
            &mut self,
            _: u32,
            _: u8,
            _: &[u8],
            _: &[u8],
        ) -> Result<fireopal_abi::btl::SendiOutcome, fireopal_abi::PluginError> {
            Ok(fireopal_abi::btl::SendiOutcome::Busy)
        }
        fn send(
            &mut self,
            _: u32,
            _: u8,
            _: &[u8],
            _: &[u8],
            _: u64,
        ) -> Result<fireopal_abi::btl::Completion, fireopal_abi::PluginError> {
            Err(fireopal_abi::PluginError::unsupported("send"))
        }
        fn progress(
            &mut self,
            _: &mut dyn fireopal_abi::btl::EventSink,
        ) -> Result<usize, fireopal_abi::PluginError> {
            Ok(0)
        }
    }

    #[test]
    fn the_macro_instantiates_every_case_in_order() {
        let from_macro: Vec<&str> =
            crate::__with_transport_cases! { __transport_case_names () }.to_vec();
        let listed: Vec<&str> = super::cases::<NoComponent>()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(from_macro, listed);
    }

    #[test]
    fn a_component_that_opens_no_module_fails_every_case() {
        for (name, outcome) in super::run_all::<NoComponent>(&crate::Setup::ranks(2)) {
            let failure = outcome.expect_err(name);
            assert!(failure.0.contains("gave no module"), "{name}: {failure}");
        }
    }
}
