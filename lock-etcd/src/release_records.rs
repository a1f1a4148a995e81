//! The keys that keep a release's answer. A release writes one, bound to a shared lease of ten
//! minutes, in the transaction that ends its hold: sent again after its reply was lost, the
//! release finds it and answers "released", as its first run did, instead of "not held" (and
//! its holder being told the lease was lost). Once a release has its answer nobody sends it
//! again, so its key goes with this backend's next release, in the same transaction: a backend
//! leaves about one behind for each release in flight, not one for each release ever made.

use parking_lot::Mutex;

/// How many answered releases' keys one release deletes.
const DELETED_PER_RELEASE: usize = 16;

/// The keys of this backend's releases that have their answer, waiting to be deleted.
#[derive(Debug, Default)]
pub(crate) struct ReleaseRecords {
    answered: Mutex<Vec<Vec<u8>>>,
}

impl ReleaseRecords {
    /// Takes keys for a release to delete (some, not all, so a release stays small).
    pub(crate) fn take(&self) -> Vec<Vec<u8>> {
        let mut answered = self.answered.lock();
        let from = answered.len().saturating_sub(DELETED_PER_RELEASE);
        answered.split_off(from)
    }

    /// Gives back keys a release took and did not surely delete.
    pub(crate) fn give_back(&self, keys: Vec<Vec<u8>>) {
        self.answered.lock().extend(keys);
    }

    /// Notes that the release that wrote (or may have written) `key` has its answer.
    pub(crate) fn answered(&self, key: Vec<u8>) {
        self.answered.lock().push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_takes_a_bounded_share_and_what_it_gives_back_comes_again() {
        let records = ReleaseRecords::default();
        for i in 0..20u8 {
            records.answered(vec![i]);
        }
        let first = records.take();
        assert_eq!(first.len(), DELETED_PER_RELEASE);
        records.give_back(first);
        assert_eq!(records.take().len(), DELETED_PER_RELEASE);
        assert_eq!(records.take().len(), 20 - DELETED_PER_RELEASE);
        assert!(records.take().is_empty());
    }
}
