//! Model-based property test of the registration cache: random sequences of
//! get / put / invalidate / limit changes / backend failures, checked after
//! every step against a brute-force model built from what the backends saw.

mod regcache_common;

use std::collections::{BTreeMap, BTreeSet};

use fireopal_core::regcache::{
    Access, GetError, RegCache, RegCacheConfig, Region, Registration, TransportId,
};
use proptest::prelude::*;
use regcache_common::{FailMode, Recorder};

const PAGE: usize = 4096;
const BASE: usize = 0x40_0000;
const PAGES: usize = 48;
const TRANSPORTS: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    Get {
        transport: usize,
        page: usize,
        offset: usize,
        len: usize,
        access: u8,
    },
    /// A get starting in the first page of a held registration (the home
    /// table's path), with the same transport and rights.
    GetAtStart {
        held: usize,
        offset: usize,
        len: usize,
    },
    Put(usize),
    Invalidate {
        page: usize,
        offset: usize,
        len: usize,
    },
    Limits {
        count: Option<usize>,
        bytes: Option<usize>,
    },
    Merge(bool),
    Fail {
        transport: usize,
        mode: FailMode,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let fail = prop_oneof![
        4 => Just(FailMode::Never),
        1 => Just(FailMode::Always),
        1 => (1usize..4).prop_map(|p| FailMode::LongerThan(p * PAGE)),
    ];
    prop_oneof![
        10 => (0..TRANSPORTS, 0..PAGES, 0..PAGE, 1..3 * PAGE, 0u8..16).prop_map(
            |(transport, page, offset, len, access)| Op::Get { transport, page, offset, len, access }
        ),
        4 => (any::<usize>(), 0..PAGE, 1..2 * PAGE)
            .prop_map(|(held, offset, len)| Op::GetAtStart { held, offset, len }),
        7 => any::<usize>().prop_map(Op::Put),
        3 => (0..PAGES, 0..PAGE, 0..6 * PAGE)
            .prop_map(|(page, offset, len)| Op::Invalidate { page, offset, len }),
        1 => (proptest::option::of(0usize..8), proptest::option::of(0usize..24))
            .prop_map(|(count, bytes)| Op::Limits { count, bytes }),
        1 => any::<bool>().prop_map(Op::Merge),
        1 => (0..TRANSPORTS, fail).prop_map(|(transport, mode)| Op::Fail { transport, mode }),
    ]
}

/// A registration as the backends know it: (transport index, handle).
type Key = (usize, u64);

struct World {
    cache: RegCache<Recorder>,
    recorders: Vec<Recorder>,
    ids: Vec<TransportId>,
    held: Vec<Registration<Recorder>>,
    /// Registrations invalidated: never to be returned again.
    dead: BTreeSet<Key>,
    max_count: usize,
    max_bytes: usize,
    /// Gets the model expects to be hits and misses.
    hits: u64,
    misses: u64,
}

impl World {
    fn new(merge: bool) -> Self {
        let config = RegCacheConfig {
            merge,
            ..RegCacheConfig::default()
        };
        let cache = RegCache::new(config).expect("config");
        let recorders: Vec<Recorder> = (0..TRANSPORTS).map(|_| Recorder::new()).collect();
        let ids = recorders
            .iter()
            .map(|r| cache.add_transport(r.clone()).expect("transport"))
            .collect();
        World {
            cache,
            recorders,
            ids,
            held: Vec::new(),
            dead: BTreeSet::new(),
            max_count: usize::MAX,
            max_bytes: usize::MAX,
            hits: 0,
            misses: 0,
        }
    }

    fn key(&self, reg: &Registration<Recorder>) -> Key {
        (reg.transport().index(), *reg.handle())
    }

    /// Registrations live in a backend: key -> (region, access).
    fn live(&self) -> BTreeMap<Key, (Region, Access)> {
        let mut out = BTreeMap::new();
        for (t, r) in self.recorders.iter().enumerate() {
            for (h, v) in &r.log().live {
                out.insert((t, *h), *v);
            }
        }
        out
    }

    /// What the model says the cache holds: live and not invalidated.
    fn cached(&self) -> BTreeMap<Key, (Region, Access)> {
        let mut live = self.live();
        live.retain(|k, _| !self.dead.contains(k));
        live
    }

    fn snapshot(&self) -> Vec<(usize, Region, Access, u32)> {
        let mut v: Vec<_> = self
            .cache
            .find_overlapping(0, usize::MAX)
            .into_iter()
            .map(|i| (i.transport.index(), i.region, i.access, i.refs))
            .collect();
        v.sort_by_key(|x| (x.0, x.1.base(), x.1.last(), x.2.bits(), x.3));
        v
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Get {
                transport,
                page,
                offset,
                len,
                access,
            } => {
                let addr = BASE + page * PAGE + offset;
                self.get(transport, addr, len, Access::from_bits(access))?;
            }
            Op::GetAtStart { held, offset, len } => {
                if !self.held.is_empty() {
                    let reg = &self.held[held % self.held.len()];
                    let addr = reg.region().base() + offset;
                    let (transport, access) = (reg.transport().index(), reg.access());
                    self.get(transport, addr, len, access)?;
                }
            }
            Op::Put(i) => {
                if !self.held.is_empty() {
                    let reg = self.held.swap_remove(i % self.held.len());
                    self.cache.put(reg);
                }
            }
            Op::Invalidate { page, offset, len } => {
                let addr = BASE + page * PAGE + offset;
                let touching: Vec<Key> = match Region::new(addr, len) {
                    Some(range) => self
                        .cached()
                        .into_iter()
                        .filter(|(_, (r, _))| r.overlaps(&range))
                        .map(|(k, _)| k)
                        .collect(),
                    None => Vec::new(),
                };
                let removed = self.cache.invalidate(addr, len);
                prop_assert_eq!(removed, touching.len());
                let in_use: BTreeSet<Key> = self.held.iter().map(|r| self.key(r)).collect();
                let live = self.live();
                for k in touching {
                    // Idle ones are deregistered at once, in-use ones later.
                    prop_assert_eq!(live.contains_key(&k), in_use.contains(&k));
                    self.dead.insert(k);
                }
            }
            Op::Limits { count, bytes } => {
                self.max_count = count.unwrap_or(usize::MAX);
                self.max_bytes = bytes.map_or(usize::MAX, |p| p * PAGE);
                self.cache.set_limits(self.max_count, self.max_bytes);
            }
            Op::Merge(on) => self.cache.set_merge(on),
            Op::Fail { transport, mode } => self.recorders[transport].set_fail(mode),
        }
        self.check()
    }

    /// One `get`, checked against the model: a hit exactly when a cached
    /// registration covers the request.
    fn get(
        &mut self,
        transport: usize,
        addr: usize,
        len: usize,
        access: Access,
    ) -> Result<(), TestCaseError> {
        let want = Region::new(addr, len).expect("small region");
        let candidates: BTreeSet<Key> = self
            .cached()
            .into_iter()
            .filter(|((t, _), (r, a))| *t == transport && r.contains(&want) && a.contains(access))
            .map(|(k, _)| k)
            .collect();
        let registered: u64 = self.recorders.iter().map(Recorder::registered).sum();
        let before = (self.snapshot(), self.cache.stats(), self.live());
        match self.cache.get(addr, len, access, self.ids[transport]) {
            Ok(reg) => {
                let key = self.key(&reg);
                prop_assert!(reg.region().contains(&want), "does not cover");
                prop_assert_eq!(reg.transport(), self.ids[transport]);
                prop_assert!(reg.access().contains(access));
                prop_assert!(!self.dead.contains(&key), "invalidated one returned");
                let now: u64 = self.recorders.iter().map(Recorder::registered).sum();
                if candidates.is_empty() {
                    prop_assert_eq!(now, registered + 1, "a miss registers once");
                    self.misses += 1;
                } else {
                    prop_assert_eq!(now, registered, "a hit registered again");
                    prop_assert!(candidates.contains(&key));
                    self.hits += 1;
                }
                self.held.push(reg);
            }
            Err(GetError::Backend(_)) => {
                prop_assert!(candidates.is_empty());
                let after = (self.snapshot(), self.cache.stats(), self.live());
                prop_assert_eq!(before, after, "failed get changed the cache");
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected {e}"))),
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let live = self.live();
        // Nothing in use is deregistered.
        for reg in &self.held {
            prop_assert!(
                live.contains_key(&self.key(reg)),
                "in-use registration deregistered"
            );
        }
        for r in &self.recorders {
            prop_assert!(
                r.log().bad_deregistrations.is_empty(),
                "double deregistration"
            );
        }
        // The index holds exactly what the model says, with the right counts.
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        for reg in &self.held {
            *refs.entry(reg.id()).or_default() += 1;
        }
        let infos = self.cache.find_overlapping(0, usize::MAX);
        let mut got: Vec<_> = infos
            .iter()
            .map(|i| {
                (
                    i.transport.index(),
                    i.region.base(),
                    i.region.last(),
                    i.access.bits(),
                )
            })
            .collect();
        let mut want: Vec<_> = self
            .cached()
            .into_iter()
            .map(|((t, _), (r, a))| (t, r.base(), r.last(), a.bits()))
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(got, want);
        for i in &infos {
            prop_assert_eq!(i.refs, refs.get(&i.id).copied().unwrap_or(0));
        }
        // Counters agree with the backends.
        let s = self.cache.stats();
        prop_assert_eq!((s.hits, s.misses), (self.hits, self.misses));
        prop_assert_eq!(s.live_count, live.len());
        prop_assert_eq!(
            s.live_bytes,
            live.values().map(|(r, _)| r.len()).sum::<usize>()
        );
        // Over a limit only while nothing idle is left to evict.
        if s.live_count > self.max_count || s.live_bytes > self.max_bytes {
            prop_assert!(
                infos.iter().all(|i| i.refs > 0),
                "idle entry kept over limits"
            );
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), TestCaseError> {
        self.held.clear();
        let recorders = self.recorders.clone();
        drop(self);
        for r in &recorders {
            prop_assert_eq!(r.registered(), r.deregistered());
            prop_assert_eq!(r.live_count(), 0);
            prop_assert!(r.log().bad_deregistrations.is_empty());
        }
        Ok(())
    }
}

fn run(merge: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut world = World::new(merge);
    for op in ops {
        world.step(op)?;
    }
    world.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn cache_matches_model_with_merging(ops in proptest::collection::vec(op(), 1..160)) {
        run(true, &ops)?;
    }

    #[test]
    fn cache_matches_model_without_merging(ops in proptest::collection::vec(op(), 1..160)) {
        run(false, &ops)?;
    }
}
