//! Connection set-up: simultaneous connects, many ranks, several links,
//! peers added late.

mod common;

use std::time::Duration;

use abi_stable::std_types::RSlice;
use common::*;
use fireopal_abi::btl::{PeerAddress, Reachability, SendiOutcome, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_btl_tcp::TcpComponent;

/// Both ends of each pair see one connection, the same one.
fn one_connection_between(procs: &[Proc], a: usize, b: usize, module: usize) {
    let (la, ra) = procs[a].modules[module]
        .connection_addresses(procs[b].rank)
        .expect("a connected");
    let (lb, rb) = procs[b].modules[module]
        .connection_addresses(procs[a].rank)
        .expect("b connected");
    assert_eq!((la, ra), (rb, lb), "both ends use the same connection");
}

#[test]
fn simultaneous_connects_end_with_one_connection_and_ordered_delivery() {
    // Different interleavings of the two sides' progress, so either side
    // may be the first to decide.
    for schedule in [
        &[0usize, 1][..],
        &[1, 0],
        &[1, 1, 1, 0],
        &[0, 0, 0, 1],
        &[1, 0, 0, 1, 1],
    ] {
        simultaneous(schedule);
    }
}

fn simultaneous(schedule: &[usize]) {
    const N: usize = 200;
    let mut procs = job(JobSpec::new(2));
    // Both sides post before either progresses: both dial.
    let mut cookies = [Vec::new(), Vec::new()];
    for i in 0..N {
        for from in 0..2usize {
            let to = 1 - from as u32;
            let payload = pattern((from * N + i) as u64, 1 + i * 97);
            if let Some(c) = post(
                procs[from].m(),
                to,
                1,
                &(i as u32).to_le_bytes(),
                &payload,
                i as u64,
            ) {
                cookies[from].push(c);
            }
        }
    }
    let start = std::time::Instant::now();
    for &i in schedule.iter().cycle() {
        if procs[0].rec.count_from(1) == N && procs[1].rec.count_from(0) == N {
            break;
        }
        procs[i].progress();
        assert!(
            start.elapsed() < LIMIT,
            "timed out with schedule {schedule:?}"
        );
    }
    // The loser is closed by whichever side decides; the other side sees
    // it close on a later progress call.
    drive(&mut procs, "the losing connection to close", |p| {
        p.iter().all(|q| q.modules[0].connection_count() <= 1)
    });
    settle(&mut procs, Duration::from_millis(20));
    for p in &procs {
        assert_eq!(
            p.modules[0].connection_count(),
            1,
            "the losing connection is gone ({schedule:?})"
        );
        let from = 1 - p.rank as usize;
        for (i, m) in p.rec.from(from as u32).enumerate() {
            assert_eq!(m.header, (i as u32).to_le_bytes(), "ordered");
            assert!(m.payload == pattern((from * N + i) as u64, 1 + i * 97));
        }
        assert!(p.rec.failed.is_empty());
        assert_eq!(p.rec.repeated_completion(), None);
    }
    for (r, c) in cookies.iter().enumerate() {
        assert_eq!(procs[r].rec.sends.len(), c.len(), "every send completed");
    }
    one_connection_between(&procs, 0, 1, 0);
    // The connection kept is the one the lower rank opened: rank 1
    // accepted it, so its local port is its listening port.
    let (local1, _) = procs[1].modules[0].connection_addresses(0).unwrap();
    assert_eq!(local1, listen_addr(&procs[1].modules[0]));
}

#[test]
fn all_to_all_among_five_ranks() {
    const N: usize = 50;
    let mut procs = job(JobSpec::new(5));
    for i in 0..N {
        for (from, p) in procs.iter_mut().enumerate() {
            for to in (0..5u32).filter(|&t| t as usize != from) {
                let h = [from as u8, to as u8, i as u8];
                post(p.m(), to, 2, &h, &pattern(i as u64, i * 31), i as u64);
            }
        }
    }
    drive(&mut procs, "all-to-all", |p| {
        p.iter().all(|q| q.rec.delivered.len() == 4 * N)
    });
    for p in &procs {
        for from in (0..5u32).filter(|&f| f != p.rank) {
            for (i, m) in p.rec.from(from).enumerate() {
                assert_eq!(m.header, [from as u8, p.rank as u8, i as u8]);
                assert!(m.payload == pattern(i as u64, i * 31));
            }
        }
        assert_eq!(p.modules[0].connection_count(), 4);
    }
    for a in 0..5 {
        for b in a + 1..5 {
            one_connection_between(&procs, a, b, 0);
        }
    }
}

#[test]
fn each_link_is_its_own_module_and_connection() {
    let mut procs = job(JobSpec::new(2).param("btl_tcp_links", ParamValue::UInt(3)));
    assert_eq!(procs[0].modules.len(), 3);
    let links: Vec<u8> = procs[0].modules.iter().map(|m| m.link()).collect();
    assert_eq!(links, [0, 1, 2]);
    // Every module publishes the whole list.
    let a0 = procs[0].modules[0].address().unwrap();
    assert_eq!(procs[0].modules[2].address().unwrap(), a0);
    assert_eq!(
        fireopal_core::wire::tcp::address::parse_addresses(&a0)
            .unwrap()
            .len(),
        3
    );

    for (k, m) in procs[0].modules.iter_mut().enumerate() {
        for i in 0..10u8 {
            post(
                m,
                1,
                k as u8,
                &[i],
                &pattern(u64::from(i), 70_000),
                u64::from(i),
            );
        }
    }
    drive(&mut procs, "messages on every link", |p| {
        p[1].rec.count_from(0) == 30
    });
    for k in 0..3u8 {
        let on_link: Vec<_> = procs[1].rec.from(0).filter(|m| m.tag == k).collect();
        assert_eq!(on_link.len(), 10);
        for (i, m) in on_link.iter().enumerate() {
            assert_eq!(m.header, [i as u8], "ordered per link");
        }
    }
    let mut seen = std::collections::HashSet::new();
    for k in 0..3 {
        one_connection_between(&procs, 0, 1, k);
        assert!(seen.insert(procs[0].modules[k].connection_addresses(1).unwrap()));
    }
}

#[test]
fn a_peer_added_late_is_served_on_its_own_connection() {
    // Rank 0 knows rank 1; rank 1 has not added anyone yet.
    let spec = JobSpec::new(2);
    let (h0, _) = host_for(&spec, 0, KEY);
    let (h1, logs1) = host_for(&spec, 1, KEY);
    use fireopal_abi::btl::BtlComponentImpl;
    let m0 = TcpComponent::open(h0).unwrap();
    let m1 = TcpComponent::open(h1).unwrap();
    let mut procs = vec![
        Proc {
            rank: 0,
            modules: m0,
            logs: Default::default(),
            rec: Recorder::default(),
        },
        Proc {
            rank: 1,
            modules: m1,
            logs: logs1,
            rec: Recorder::default(),
        },
    ];
    let a1 = procs[1].m().address().unwrap();
    let added = procs[0]
        .m()
        .add_peers(&[PeerAddress {
            rank: 1,
            node_local: true,
            address: RSlice::from_slice(&a1),
        }])
        .unwrap();
    assert_eq!(added, [Reachability::Reachable]);
    assert_eq!(
        procs[0].m().sendi(1, 1, b"", b"early").unwrap(),
        SendiOutcome::Busy
    );
    post(procs[0].m(), 1, 1, b"", b"early", 1);
    drive(&mut procs, "delivery to the late peer", |p| {
        p[1].rec.count_from(0) == 1
    });
    // Rank 1 answers over the connection rank 0 opened.
    post(procs[1].m(), 0, 1, b"", b"reply", 2);
    drive(&mut procs, "the reply", |p| p[0].rec.count_from(1) == 1);
    // Adding rank 0 later keeps that connection.
    let a0 = procs[0].m().address().unwrap();
    let added = procs[1]
        .m()
        .add_peers(&[PeerAddress {
            rank: 0,
            node_local: true,
            address: RSlice::from_slice(&a0),
        }])
        .unwrap();
    assert_eq!(added, [Reachability::Reachable]);
    one_connection_between(&procs, 0, 1, 0);
}

#[test]
fn add_peers_checks_what_it_is_given() {
    let mut procs = job(JobSpec::new(3));
    let good = procs[1].m().address().unwrap();
    let mut bad = good.clone();
    bad[0] = b'X';
    let mut truncated = good.clone();
    truncated.pop();
    let answers = procs[0]
        .m()
        .add_peers(&[
            PeerAddress {
                rank: 7,
                node_local: true,
                address: RSlice::from_slice(&good),
            },
            PeerAddress {
                rank: 0,
                node_local: true,
                address: RSlice::from_slice(&good),
            },
        ])
        .unwrap();
    assert!(answers
        .iter()
        .all(|a| matches!(a, Reachability::Unreachable(_))));

    // A fresh module for checks of malformed addresses.
    let (h, logs) = host_for(&JobSpec::new(4), 0, KEY);
    use fireopal_abi::btl::BtlComponentImpl;
    let mut m = TcpComponent::open(h).unwrap().remove(0);
    let answers = m
        .add_peers(&[
            PeerAddress {
                rank: 1,
                node_local: true,
                address: RSlice::from_slice(&bad),
            },
            PeerAddress {
                rank: 2,
                node_local: true,
                address: RSlice::from_slice(&truncated),
            },
        ])
        .unwrap();
    for a in &answers {
        let Reachability::Unreachable(reason) = a else {
            panic!("malformed address accepted");
        };
        assert!(reason.contains("bad published address"), "{reason}");
    }
    assert!(logs
        .lock()
        .unwrap()
        .iter()
        .any(|(_, l)| l.contains("bad tcp address")));
    // A rank added twice keeps the first answer.
    let again = m
        .add_peers(&[PeerAddress {
            rank: 1,
            node_local: true,
            address: RSlice::from_slice(&good),
        }])
        .unwrap();
    assert!(matches!(again[0], Reachability::Unreachable(_)));
    // Loopback between peers on different nodes is never used.
    let remote = m
        .add_peers(&[PeerAddress {
            rank: 3,
            node_local: false,
            address: RSlice::from_slice(&procs[2].m().address().unwrap()),
        }])
        .unwrap();
    assert!(
        matches!(remote[0], Reachability::Unreachable(_)),
        "{remote:?}"
    );
}

#[test]
fn ipv6_loopback_works_when_enabled() {
    // Without IPv6 on this machine's loopback the component must say so.
    let spec = JobSpec::new(2)
        .param("btl_tcp_ipv6", ParamValue::Bool(true))
        .param("btl_tcp_if_include", ParamValue::Str("::1".into()));
    let (h, _) = host_for(&spec, 0, KEY);
    use fireopal_abi::btl::BtlComponentImpl;
    let has_v6_loopback = std::net::TcpListener::bind("[::1]:0").is_ok();
    match TcpComponent::query(&h) {
        fireopal_abi::Availability::Available { .. }
        | fireopal_abi::Availability::AvailableWithNote { .. } => assert!(has_v6_loopback),
        fireopal_abi::Availability::Unavailable { reason } => {
            assert!(!has_v6_loopback, "{reason}");
            return;
        }
    }
    let mut procs = job(spec);
    let entry = *procs[0].m().my_entry().unwrap();
    assert_eq!(entry.ip.to_string(), "::1");
    post(procs[0].m(), 1, 1, b"v6", &pattern(6, 200_000), 1);
    post(procs[1].m(), 0, 1, b"v6", &pattern(7, 10), 2);
    drive(&mut procs, "messages over IPv6", |p| {
        p[0].rec.count_from(1) == 1 && p[1].rec.count_from(0) == 1
    });
    assert!(procs[1].rec.delivered[0].payload == pattern(6, 200_000));
    one_connection_between(&procs, 0, 1, 0);
}

#[test]
fn bad_parameters_make_the_component_unavailable() {
    use fireopal_abi::btl::BtlComponentImpl;
    for (name, value, needle) in [
        ("btl_tcp_links", ParamValue::UInt(0), "btl_tcp_links"),
        (
            "btl_tcp_if_include",
            ParamValue::Str("10.0.0.0/99".into()),
            "btl_tcp_if_include",
        ),
        (
            "btl_tcp_if_include",
            ParamValue::Str("no-such-interface".into()),
            "no usable interface",
        ),
        (
            "btl_tcp_eager_limit",
            ParamValue::Size(16),
            "btl_tcp_eager_limit",
        ),
        (
            "btl_tcp_keepalive_time",
            ParamValue::UInt(40_000),
            "btl_tcp_keepalive_time: must be between 0 and 32767",
        ),
        (
            "btl_tcp_keepalive_intvl",
            ParamValue::UInt(0),
            "btl_tcp_keepalive_intvl: must be between 1 and 32767",
        ),
        (
            "btl_tcp_keepalive_probes",
            ParamValue::UInt(128),
            "btl_tcp_keepalive_probes: must be between 1 and 127",
        ),
        (
            "btl_tcp_user_timeout_ms",
            ParamValue::UInt(1 << 40),
            "btl_tcp_user_timeout_ms",
        ),
        (
            "btl_tcp_ack_timeout_ms",
            ParamValue::UInt(1 << 33),
            "btl_tcp_ack_timeout_ms: must be below 2^32",
        ),
    ] {
        let (h, _) = host_for(&JobSpec::new(2).param(name, value), 0, KEY);
        match TcpComponent::query(&h) {
            fireopal_abi::Availability::Unavailable { reason } => {
                assert!(reason.contains(needle), "{name}: {reason}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let (h, _) = host_for(&JobSpec::new(2), 0, KEY);
    match TcpComponent::query(&h) {
        fireopal_abi::Availability::AvailableWithNote { priority, note } => {
            assert_eq!(priority, 20);
            assert!(note.starts_with("listens on "), "{note}");
        }
        other => panic!("default: {other:?}"),
    }
    // A singleton has no peer: nothing for tcp to do.
    let (h, _) = host_for(&JobSpec::new(1), 0, KEY);
    match TcpComponent::query(&h) {
        fireopal_abi::Availability::Unavailable { reason } => {
            assert!(reason.contains("no peer"), "{reason}")
        }
        other => panic!("singleton: {other:?}"),
    }
}

#[test]
fn parameters_are_declared_once_with_the_component_prefix() {
    use abi_stable::sabi_trait::TD_Opaque;
    use abi_stable::std_types::{ROk, RResult};
    use fireopal_abi::btl::BtlComponentImpl;
    use fireopal_abi::param::{ParamRegistrar, ParamRegistry, ParamRegistry_TO, ParamSpec};
    use fireopal_abi::PluginError;

    #[derive(Default)]
    struct Collect(Vec<ParamSpec>);
    impl ParamRegistry for Collect {
        fn register(&mut self, spec: ParamSpec) -> RResult<(), PluginError> {
            self.0.push(spec);
            ROk(())
        }
    }
    let mut c = Collect::default();
    TcpComponent::register_params(&mut ParamRegistrar::new(ParamRegistry_TO::from_ptr(
        &mut c, TD_Opaque,
    )))
    .unwrap();
    let names: Vec<&str> = c.0.iter().map(|s| s.name.as_str()).collect();
    for n in &names {
        assert!(n.starts_with("btl_tcp_"), "{n}");
    }
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    for needed in [
        "btl_tcp_if_include",
        "btl_tcp_if_exclude",
        "btl_tcp_links",
        "btl_tcp_sndbuf",
    ] {
        assert!(names.contains(&needed), "{needed}");
    }
    assert!(c.0.iter().all(|s| !s.help.is_empty()));
}
