//! Sets of IPv4 addresses as merged ranges, so that the lowest free address of a subnet
//! is found in O(log n) however many addresses are taken: allocation never scans.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Disjoint, non-adjacent inclusive ranges `start -> end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpSet {
    ranges: BTreeMap<u32, u32>,
}

impl IpSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, ip: u32) {
        self.insert_range(ip, ip);
    }

    /// Adds `[lo, hi]`, merging with overlapping and adjacent ranges.
    pub fn insert_range(&mut self, lo: u32, hi: u32) {
        let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
        if let Some((&s, &e)) = self.ranges.range(..=lo).next_back()
            && e.saturating_add(1) >= lo
        {
            lo = s;
            hi = hi.max(e);
            self.ranges.remove(&s);
        }
        while let Some((&s, &e)) = self.ranges.range(lo..).next() {
            if s > hi.saturating_add(1) && hi != u32::MAX {
                break;
            }
            hi = hi.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(lo, hi);
    }

    pub fn remove(&mut self, ip: u32) {
        let Some((&s, &e)) = self.ranges.range(..=ip).next_back() else {
            return;
        };
        if e < ip {
            return;
        }
        self.ranges.remove(&s);
        if s < ip {
            self.ranges.insert(s, ip - 1);
        }
        if ip < e {
            self.ranges.insert(ip + 1, e);
        }
    }

    pub fn contains(&self, ip: u32) -> bool {
        self.ranges
            .range(..=ip)
            .next_back()
            .is_some_and(|(_, &e)| e >= ip)
    }

    /// The lowest address in `[lo, hi]` that is not in the set.
    pub fn lowest_free(&self, lo: u32, hi: u32) -> Option<u32> {
        let candidate = match self.ranges.range(..=lo).next_back() {
            Some((_, &e)) if e >= lo => e.checked_add(1)?,
            _ => lo,
        };
        // Ranges are merged and never adjacent, so the address after one is free.
        (candidate <= hi).then_some(candidate)
    }

    /// The lowest address of `[lo, hi]` in neither this set nor `other`.
    pub fn lowest_free_with(&self, other: &IpSet, lo: u32, hi: u32) -> Option<u32> {
        let mut candidate = lo;
        loop {
            let a = self.lowest_free(candidate, hi)?;
            let b = other.lowest_free(a, hi)?;
            if a == b {
                return Some(a);
            }
            candidate = b;
        }
    }

    /// How many addresses the set holds.
    pub fn len(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(&s, &e)| u64::from(e - s) + 1)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Every range, for merging into another set.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    pub fn extend(&mut self, other: &IpSet) {
        for (s, e) in other.ranges() {
            self.insert_range(s, e);
        }
    }
}

pub fn to_u32(ip: Ipv4Addr) -> u32 {
    u32::from(ip)
}

pub fn to_ip(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_merge_and_split() {
        let mut set = IpSet::new();
        set.insert(5);
        set.insert(7);
        set.insert(6);
        assert_eq!(set.ranges().collect::<Vec<_>>(), [(5, 7)]);
        set.remove(6);
        assert_eq!(set.ranges().collect::<Vec<_>>(), [(5, 5), (7, 7)]);
        assert_eq!(set.lowest_free(5, 10), Some(6));
        assert_eq!(set.lowest_free(7, 7), None);
        assert_eq!(set.len(), 2);
    }

    proptest! {
        #[test]
        fn the_set_agrees_with_a_plain_set(ops in prop::collection::vec((any::<bool>(), 0u32..64), 0..200), lo in 0u32..64, span in 0u32..64) {
            let mut set = IpSet::new();
            let mut plain = std::collections::BTreeSet::new();
            for (add, ip) in ops {
                if add { set.insert(ip); plain.insert(ip); } else { set.remove(ip); plain.remove(&ip); }
            }
            for ip in 0..64 {
                prop_assert_eq!(set.contains(ip), plain.contains(&ip));
            }
            let hi = lo + span;
            prop_assert_eq!(set.lowest_free(lo, hi), (lo..=hi).find(|ip| !plain.contains(ip)));
            prop_assert_eq!(set.len(), plain.len() as u64);
        }
    }
}
