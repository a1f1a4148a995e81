//! [`HeardCounts`]: what a backend's listener has heard, for
//! [`DistributedLock::releases_heard`](crate::backend::DistributedLock::releases_heard).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many counts are kept: keys that share one only cost each other's waiters a retry.
const BUCKETS: usize = 64;

/// Counts of the release announcements a backend's listener has heard, in a few buckets by key
/// (a lock's, a channel's, a prefix's): what
/// [`DistributedLock::releases_heard`](crate::backend::DistributedLock::releases_heard)
/// reads.
///
/// The listener counts an announcement with [`heard`](Self::heard) before it wakes the
/// subscriptions registered by then, under the lock they register under, and calls
/// [`missed`](Self::missed) whenever an announcement may have gone unheard (a reconnect, a
/// channel it stopped listening to).
///
/// # Examples
///
/// ```
/// use dlocks::backend::HeardCounts;
///
/// let heard = HeardCounts::new();
/// let before = heard.count("orders");
/// heard.heard("orders");
/// assert_ne!(heard.count("orders"), before);
/// let before = heard.count("orders");
/// heard.missed();
/// assert_ne!(heard.count("orders"), before);
/// ```
#[derive(Debug)]
pub struct HeardCounts {
    buckets: [AtomicU64; BUCKETS],
}

impl HeardCounts {
    /// Nothing heard yet.
    pub fn new() -> Self {
        HeardCounts {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Counts an announcement about `key`.
    pub fn heard<K: Hash + ?Sized>(&self, key: &K) {
        self.buckets[bucket(key)].fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an announcement about every key: some may have been missed.
    pub fn missed(&self) {
        for count in &self.buckets {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The count that announcements about `key` move.
    pub fn count<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.buckets[bucket(key)].load(Ordering::SeqCst)
    }
}

impl Default for HeardCounts {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket `key` is counted in.
fn bucket<K: Hash + ?Sized>(key: &K) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % BUCKETS as u64) as usize
}
