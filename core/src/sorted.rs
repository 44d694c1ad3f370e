//! Small sorted collections for the web package, which has a size budget: a `Vec` kept in
//! order and searched by binary search, where a `BTreeMap` or a sort would bring its insert,
//! search and drop (or quicksort) code into the module for each key and value type.

use alloc::vec::Vec;
use core::borrow::Borrow;

/// The distinct values of `items`, in order, each placed by a binary search: a small function
/// per type, where `sort_unstable` + `dedup` compiled a quicksort of 3 to 10 KiB into the web
/// package per type. For short lists or few distinct values (axes, characters, op names).
///
/// ```
/// assert_eq!(kiln_core::sorted::sorted_unique([3, 1, 3, 0]), vec![0, 1, 3]);
/// ```
pub fn sorted_unique<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if let Err(i) = out.binary_search(&x) {
            out.insert(i, x);
        }
    }
    out
}

/// Sorts `keys` in place, ascending: a heapsort of plain integers, a fraction of the code of
/// `sort_unstable`'s quicksort (about 1.8 KB gzipped in the web package), for
/// [`crate::nn::gpt::choose`]'s one sort of the vocabulary per generated token.
pub(crate) fn heapsort(keys: &mut [u64]) {
    // Moves `keys[root]` down the max-heap of `keys[..end]` until both children are smaller.
    fn sift(keys: &mut [u64], mut root: usize, end: usize) {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                return;
            }
            if child + 1 < end && keys[child] < keys[child + 1] {
                child += 1;
            }
            if keys[root] >= keys[child] {
                return;
            }
            keys.swap(root, child);
            root = child;
        }
    }
    let n = keys.len();
    for root in (0..n / 2).rev() {
        sift(keys, root, n);
    }
    for end in (1..n).rev() {
        keys.swap(0, end);
        sift(keys, 0, end);
    }
}

/// A map as a list of `(key, value)` pairs in key order, found by binary search. For small
/// maps (the custom-op registry, a tokenizer's ids, `memory()`'s per-device sums) and for keys
/// that mostly arrive in order (kiln-web's ledger of handles): an insert or a remove moves the
/// entries after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortedMap<K, V>(Vec<(K, V)>);

impl<K, V> SortedMap<K, V> {
    /// An empty map.
    pub const fn new() -> Self {
        SortedMap(Vec::new())
    }
    /// The entries, in key order.
    pub fn iter(&self) -> core::slice::Iter<'_, (K, V)> {
        self.0.iter()
    }
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }
    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }
    /// The value of `key`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.0[i].1)
    }
    /// Takes `key`'s entry out, returning its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }
    /// The value of `key`, inserted first as `value()` when there is none.
    pub fn get_or_insert_with(&mut self, key: K, value: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (key, value()));
                i
            }
        };
        &mut self.0[i].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn sorted_map_keeps_key_order_through_inserts_and_removes() {
        let mut m = SortedMap::new();
        for k in [5u32, 1, 9, 3, 7] {
            *m.get_or_insert_with(k, || 0) += k;
        }
        assert_eq!(m.remove(&3), Some(3));
        assert_eq!(m.remove(&3), None);
        assert_eq!(m.remove(&4), None);
        *m.get_or_insert_with(9, || 0) += 1;
        let keys: Vec<(u32, u32)> = m.iter().copied().collect();
        assert_eq!(keys, [(1, 1), (5, 5), (7, 7), (9, 10)]);
        assert_eq!(m.get(&7), Some(&7));
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn sorted_unique_orders_and_dedups() {
        assert_eq!(sorted_unique([3, 1, 3, 2, 1]), [1, 2, 3]);
        assert!(sorted_unique(Vec::<u8>::new()).is_empty());
    }

    #[test]
    fn heapsort_sorts_as_sort_unstable() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0, 1, 2, 3, 7, 64, 1000] {
            // Few distinct values too (x % 5), for repeated keys.
            for modulus in [u64::MAX, 5] {
                let mut keys: Vec<u64> = (0..n)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x % modulus
                    })
                    .collect();
                let mut want = keys.clone();
                want.sort_unstable();
                heapsort(&mut keys);
                assert_eq!(keys, want, "n = {n}");
            }
        }
    }

    #[test]
    fn sorted_map_gets_and_inserts_in_key_order() {
        let mut m: SortedMap<String, u32> = SortedMap::new();
        assert!(m.is_empty() && m.get("a").is_none());
        for (k, v) in [("b", 1), ("d", 2), ("a", 3), ("c", 4)] {
            assert_eq!(*m.get_or_insert_with(k.into(), || v), v);
        }
        // An existing key keeps its value (the default is not even made).
        *m.get_or_insert_with("b".into(), || unreachable!()) += 10;
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c", "d"]);
        assert_eq!((m.len(), m.get("b"), m.get("e")), (4, Some(&11), None));
        *m.get_mut("d").unwrap() = 7;
        assert_eq!(m.get("d"), Some(&7));
        assert!(m.get_mut("zz").is_none());
        assert_eq!(m, m.clone());
        assert_eq!(SortedMap::<char, u8>::default(), SortedMap::new());
    }
}
