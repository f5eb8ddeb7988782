//! Which listening socket of a peer each of our modules talks to.
//!
//! Each module owns one (interface address, link) entry of its process's
//! address list and keeps at most one connection per peer. So that the two
//! processes agree on which of their modules form a pair (otherwise two of
//! our modules could dial the same module of the peer), both compute the
//! same matching from the two lists, always with the lower rank's list on
//! the left: candidate pairs are scored, and taken greedily from the best,
//! each entry used at most once. Entries left without a partner report the
//! peer unreachable, and the host uses other modules for it.
//!
//! Scores: same subnet 3, two loopback interfaces (only between peers on
//! one node) 2, any other pair of the same family and link 1 (routed);
//! loopback with non-loopback, different families or links: never.

use fireopal_core::wire::tcp::address::AddressEntry;

/// How good a pair is; `None` when the two cannot talk.
fn score(a: &AddressEntry, b: &AddressEntry, node_local: bool) -> Option<u8> {
    if a.link != b.link || a.ip.is_ipv4() != b.ip.is_ipv4() {
        return None;
    }
    match (a.loopback, b.loopback) {
        (true, true) if node_local => Some(2),
        (false, false) if a.same_subnet(b) => Some(3),
        (false, false) => Some(1),
        _ => None,
    }
}

/// The matching between `lower` (the lower rank's entries) and `higher`,
/// as index pairs.
pub(crate) fn pair_entries(
    lower: &[AddressEntry],
    higher: &[AddressEntry],
    node_local: bool,
) -> Vec<(usize, usize)> {
    let mut candidates: Vec<(u8, usize, usize)> = Vec::new();
    for (i, a) in lower.iter().enumerate() {
        for (j, b) in higher.iter().enumerate() {
            if let Some(s) = score(a, b, node_local) {
                candidates.push((s, i, j));
            }
        }
    }
    // Best score first; ties by list order, which both sides see alike.
    candidates.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let mut used_lower = vec![false; lower.len()];
    let mut used_higher = vec![false; higher.len()];
    let mut pairs = Vec::new();
    for (_, i, j) in candidates {
        if !used_lower[i] && !used_higher[j] {
            used_lower[i] = true;
            used_higher[j] = true;
            pairs.push((i, j));
        }
    }
    pairs
}

/// The peer entry our entry `mine` talks to, given both lists and which
/// rank is lower.
pub(crate) fn partner(
    my_entries: &[AddressEntry],
    mine: usize,
    peer_entries: &[AddressEntry],
    i_am_lower: bool,
    node_local: bool,
) -> Option<usize> {
    if i_am_lower {
        pair_entries(my_entries, peer_entries, node_local)
            .into_iter()
            .find(|&(i, _)| i == mine)
            .map(|(_, j)| j)
    } else {
        pair_entries(peer_entries, my_entries, node_local)
            .into_iter()
            .find(|&(_, j)| j == mine)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fireopal_core::wire::tcp::address::InterfaceName;
    use std::net::IpAddr;

    fn e(name: &str, ip: &str, prefix_len: u8, link: u8) -> AddressEntry {
        let ip: IpAddr = ip.parse().unwrap();
        AddressEntry {
            name: InterfaceName::new(name).unwrap(),
            ip,
            prefix_len,
            port: 1000,
            link,
            loopback: ip.is_loopback(),
        }
    }

    #[test]
    fn same_subnet_wins_over_routed() {
        let a = [e("eth0", "10.0.0.1", 24, 0), e("eth1", "10.1.0.1", 24, 0)];
        let b = [e("eth0", "10.1.0.2", 24, 0), e("eth1", "10.0.0.2", 24, 0)];
        assert_eq!(pair_entries(&a, &b, false), [(0, 1), (1, 0)]);
    }

    #[test]
    fn loopback_only_between_node_local_peers() {
        let a = [e("lo", "127.0.0.1", 8, 0), e("eth0", "10.0.0.1", 24, 0)];
        let b = [e("lo", "127.0.0.1", 8, 0), e("eth0", "10.0.0.2", 24, 0)];
        assert_eq!(pair_entries(&a, &b, true), [(1, 1), (0, 0)]);
        assert_eq!(pair_entries(&a, &b, false), [(1, 1)]);
        let only_lo = [e("lo", "127.0.0.1", 8, 0)];
        assert!(pair_entries(&only_lo, &only_lo, false).is_empty());
    }

    #[test]
    fn links_and_families_never_mix() {
        let a = [e("eth0", "10.0.0.1", 24, 0), e("eth0", "10.0.0.1", 24, 1)];
        let b = [e("eth0", "10.0.0.2", 24, 1), e("eth0", "fd00::2", 64, 0)];
        assert_eq!(pair_entries(&a, &b, false), [(1, 0)]);
    }

    #[test]
    fn each_entry_is_used_once() {
        // Two interfaces against one: one of ours stays unpaired, so no
        // module of the peer is dialled twice.
        let a = [e("eth0", "10.0.0.1", 24, 0), e("eth1", "10.1.0.1", 24, 0)];
        let b = [e("eth0", "10.0.0.2", 24, 0)];
        assert_eq!(pair_entries(&a, &b, false), [(0, 0)]);
        assert_eq!(partner(&a, 0, &b, true, false), Some(0));
        assert_eq!(partner(&a, 1, &b, true, false), None);
    }

    #[test]
    fn both_sides_agree() {
        let a = [
            e("lo", "127.0.0.1", 8, 0),
            e("eth0", "10.0.0.1", 24, 0),
            e("eth1", "10.9.0.1", 16, 0),
        ];
        let b = [
            e("eth5", "10.9.3.3", 16, 0),
            e("lo", "127.0.0.1", 8, 0),
            e("eth0", "10.0.0.2", 24, 0),
        ];
        for node_local in [false, true] {
            for (i, _) in a.iter().enumerate() {
                // `a` is the lower rank.
                if let Some(j) = partner(&a, i, &b, true, node_local) {
                    assert_eq!(partner(&b, j, &a, false, node_local), Some(i));
                }
            }
            for (j, _) in b.iter().enumerate() {
                if let Some(i) = partner(&b, j, &a, false, node_local) {
                    assert_eq!(partner(&a, i, &b, true, node_local), Some(j));
                }
            }
        }
    }
}
