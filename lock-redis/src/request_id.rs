//! Ids of release requests: the key of each release's unlock latch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A new id, unique to this release request: 32 hex digits, a random prefix drawn once per
/// process and a counter. One random draw per release would be a system call on every unlock;
/// the prefix keeps ids of different processes (and of a process restarted) apart just as well,
/// and the process id mixed into it keeps a forked child's ids apart from its parent's.
pub(crate) fn next() -> String {
    static SEED: OnceLock<(u64, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // The counter starts at a random point too: two processes whose prefixes met would still
    // need their counters to meet.
    let (prefix, start) = *SEED.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix = prefix ^ u64::from(std::process::id());
    format!("{prefix:016x}{:016x}", start.wrapping_add(count))
}

#[cfg(test)]
mod tests {
    use super::next;

    #[test]
    fn ids_are_distinct_and_as_long_as_a_uuid() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| next()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
