//! The consistency check of the side tables, for tests and debugging.

use alloc::vec;

use super::chunk::{avail, block_len, run_mask, ChunkBits, CHUNK_ORDER};
use super::layout::{CHUNK_UNITS, FREE, INSIDE, LIVE, PAYLOAD, SMALL, TAG};
use super::{BuddyAllocator, Inconsistency};

impl BuddyAllocator {
    /// Walks every side table and checks that they agree (for tests and
    /// debugging; costs time proportional to the heap size).
    pub fn check_consistency(&self) -> Result<(), Inconsistency> {
        let bad = |what, chunk| Err(Inconsistency { what, chunk });
        let mut big_counts = vec![0usize; self.big_free.len()];
        let mut small_orders = 0u8;
        let mut free_units = 0u64;
        let mut live = 0u64;
        let tail = (self.units & (CHUNK_UNITS - 1)) as u32;
        let mut c = 0usize;
        while c < self.head.len() {
            let h = self.head[c];
            let payload = u32::from(h & PAYLOAD);
            match h & TAG {
                FREE | LIVE => {
                    if payload as usize >= self.big_free.len() {
                        return bad("block order beyond the heap", Some(c));
                    }
                    let len = 1usize << payload;
                    if c % len != 0 || c + len > self.full_chunks {
                        return bad("large block misaligned or past the end", Some(c));
                    }
                    for i in c..c + len {
                        if i > c && self.head[i] != INSIDE {
                            return bad("block head inside another block", Some(i));
                        }
                        if self
                            .small_bits(i)
                            .is_some_and(|b| *b != ChunkBits::default())
                        {
                            return bad("stale small-block words", Some(i));
                        }
                    }
                    if h & TAG == FREE {
                        if !self.big_free[payload as usize].contains(c >> payload) {
                            return bad("free block missing from its bitmap", Some(c));
                        }
                        if self.head.get(c ^ len) == Some(&h) {
                            return bad("free buddies not merged", Some(c));
                        }
                        big_counts[payload as usize] += 1;
                        free_units += (len as u64) << CHUNK_ORDER;
                    } else {
                        live += 1;
                    }
                    c += len;
                }
                SMALL => {
                    let Some(&bits) = self.small_bits(c) else {
                        return bad("small chunk without its words", Some(c));
                    };
                    if bits.used == 0 || bits.starts & !bits.used != 0 {
                        return bad("small chunk empty or with a start on a free unit", Some(c));
                    }
                    if payload != 0 {
                        return bad("small chunk head with a payload", Some(c));
                    }
                    let orders = avail(bits.used);
                    for (j, set) in self.small_free.iter().enumerate() {
                        if orders >> j & 1 == 1 && !set.contains(c) {
                            return bad("small-order bitmap misses the chunk", Some(c));
                        }
                    }
                    small_orders |= orders;
                    let filler = (c == self.full_chunks && tail != 0).then_some(tail);
                    let mut covered = 0u64;
                    let mut starts = bits.starts;
                    while starts != 0 {
                        let first = starts.trailing_zeros();
                        starts &= starts - 1;
                        let len = block_len(bits, first);
                        if Some(first) == filler {
                            if first + len != 64 {
                                return bad("filler block does not reach the chunk end", Some(c));
                            }
                        } else if !len.is_power_of_two() || first % len != 0 {
                            return bad("small block not an aligned power of two", Some(c));
                        } else {
                            live += 1;
                        }
                        covered |= run_mask(first, len);
                    }
                    if covered != bits.used {
                        return bad("used units outside any block", Some(c));
                    }
                    if filler.is_some_and(|t| bits.used & !run_mask(0, t) != !run_mask(0, t)) {
                        return bad("filler units marked free", Some(c));
                    }
                    free_units += u64::from((!bits.used).count_ones());
                    c += 1;
                }
                _ => return bad("chunk belongs to no block", Some(c)),
            }
        }
        for (k, set) in self.big_free.iter().enumerate() {
            if !set.is_consistent()
                || set.len() < big_counts[k]
                || self.big_count[k] != big_counts[k]
            {
                return bad("large-order bitmap or count out of date", None);
            }
            if (self.big_mask >> k & 1 == 1) != (big_counts[k] > 0) {
                return bad("large-order mask out of date", None);
            }
        }
        if self.big_mask >> self.big_free.len() != 0 {
            return bad("large-order mask has orders past the heap", None);
        }
        if self.small_free.iter().any(|set| !set.is_consistent()) {
            return bad("small-order bitmap summaries out of date", None);
        }
        if small_orders & !self.small_mask != 0 {
            return bad("small-order mask misses an order", None);
        }
        if free_units != self.free_units || live != self.live_blocks {
            return bad("free or live counters out of date", None);
        }
        if self.groups.iter().filter(|g| g.is_some()).count() != self.group_count {
            return bad("group count out of date", None);
        }
        if !self.cache.is_consistent() {
            return bad("free cache totals or bounds out of date", None);
        }
        for order in 0..self.cache.orders() as u32 {
            let stack = self.cache.stack(order);
            for (i, &offset) in stack.iter().enumerate() {
                let chunk = usize::try_from(offset >> self.unit_shift >> CHUNK_ORDER).ok();
                let live = self.locate(offset).is_ok_and(|b| b.unit_order() == order);
                if !live || stack[..i].contains(&offset) {
                    return bad("cached block not a live block of its order", chunk);
                }
            }
        }
        if let Some((offset, order)) = self.last.get() {
            let chunk = usize::try_from(offset >> self.unit_shift >> CHUNK_ORDER).ok();
            let live = self
                .locate_live(offset)
                .is_ok_and(|b| b.unit_order() == order);
            if !live {
                return bad("last block not live or of another order", chunk);
            }
        }
        Ok(())
    }
}
