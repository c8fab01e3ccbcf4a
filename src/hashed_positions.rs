//! Positions in a `Vec` found by a 64-bit hash of their key, for tables whose keys are
//! looked up borrowed (a span's series, a data point's label set) and copied only when
//! new: the table keeps the owned keys in its own `Vec`, this keeps where each hash is.

use std::collections::HashMap;

/// Where the entries of a table with a given hash are: `index` holds the last position
/// pushed with each hash, and `chain[i]` the position pushed before `i` with the same hash.
#[derive(Default)]
pub(crate) struct HashedPositions {
    index: HashMap<u64, usize, foldhash::fast::FixedState>,
    chain: Vec<Option<usize>>,
}

impl HashedPositions {
    /// The most recently pushed position with `hash` whose entry `is_match` accepts.
    pub(crate) fn find(&self, hash: u64, mut is_match: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut candidate = self.index.get(&hash).copied();
        while let Some(position) = candidate {
            if is_match(position) {
                return Some(position);
            }
            candidate = self.chain[position];
        }
        None
    }

    /// Records the next position (the number pushed so far) under `hash`, and returns it:
    /// the table pushes its entry there.
    pub(crate) fn push(&mut self, hash: u64) -> usize {
        let position = self.chain.len();
        self.chain.push(self.index.insert(hash, position));
        position
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: four positions, two of them under one hash.
    /// Guarantees: each is found by its hash and the match, the most recent first; an
    /// unknown hash or a match no entry passes finds nothing.
    #[test]
    fn finds_positions_by_hash_and_match() {
        let mut positions = HashedPositions::default();
        let keys = ["a", "b", "c", "d"];
        let hashes = [1, 2, 1, 3];
        for (expected, hash) in hashes.into_iter().enumerate() {
            assert_eq!(positions.push(hash), expected);
        }
        for (position, key) in keys.iter().enumerate() {
            let found = positions.find(hashes[position], |candidate| keys[candidate] == *key);
            assert_eq!(found, Some(position));
        }
        assert_eq!(positions.find(1, |_| true), Some(2));
        assert_eq!(positions.find(9, |_| true), None);
        assert_eq!(positions.find(1, |_| false), None);
    }
}
