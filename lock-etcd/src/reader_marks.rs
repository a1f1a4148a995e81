//! The readers' marks this backend has put and not seen go: a reader marked behind a writer's
//! hold compares its own mark on its next try at once, where it would first be refused by the
//! writer's mark put since (the writer that asks again at once) and come in on a second try.

use std::collections::HashSet;

use parking_lot::Mutex;

/// At most this many marks are remembered: a reader past them comes in on its second try.
const LIMIT: usize = 65_536;

/// The keys of the readers' marks this backend put, as it last knew them.
#[derive(Debug, Default)]
pub(crate) struct ReaderMarks {
    keys: Mutex<HashSet<Vec<u8>>>,
}

impl ReaderMarks {
    /// The mark at `key` was put.
    pub(crate) fn put(&self, key: &[u8]) {
        let mut keys = self.keys.lock();
        if keys.len() < LIMIT {
            keys.insert(key.to_vec());
        }
    }

    /// Whether the mark at `key` was put and not seen go since.
    pub(crate) fn has(&self, key: &[u8]) -> bool {
        self.keys.lock().contains(key)
    }

    /// The mark at `key` went (its reader came in or gave up), or was found gone.
    pub(crate) fn forget(&self, key: &[u8]) {
        self.keys.lock().remove(key);
    }
}
