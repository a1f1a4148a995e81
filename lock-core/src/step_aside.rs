//! A client's turn for other clients' waiters, on locks the store keeps no queue for.
//!
//! Threads of one client take turns through the client's own queue. Waiters of other clients
//! (other processes) learn of a release only from the store's message, which reaches them
//! after the releasing thread's next attempt has already reached the store: a thread looping
//! on a lock would take it again nearly every time, and a process could keep it for tens of
//! milliseconds while another waits.
//!
//! So when a release answers that other clients were waiting
//! ([`Release::ReleasedToOthers`](crate::backend::Release::ReleasedToOthers)), this client's
//! next attempts on that lock first wait a short while (until a release message comes, or a
//! few round trips have passed) for one of those waiters to take it; and its releases go
//! through the store, where every waiter hears them, rather than straight to a waiter of its
//! own, until a release finds nobody else waiting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use crate::engine::HANDOFF_AFTER;
use crate::kind::Target;

/// The longest a new attempt waits for other clients' waiters (on a slow network).
const MAX_STEP_ASIDE: Duration = Duration::from_millis(100);

/// How many release round trips a new attempt waits: another client's waiter needs the
/// release message's trip, a wake-up and its own acquire to get there.
const ROUND_TRIPS: u32 = 4;

/// Past this many locks marked, marks older than [`FORGET_AFTER`] are dropped.
const MAX_MARKS: usize = 1024;
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The locks on which other clients were waiting at this client's last release.
#[derive(Debug, Default)]
pub(crate) struct StepAside {
    marks: Mutex<HashMap<Target, Mark>>,
    /// Whether any lock is marked: the uncontended path looks no further.
    any: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    /// Until when new attempts wait before trying.
    until: Instant,
    /// When the release that set it was answered.
    seen_at: Instant,
}

impl StepAside {
    /// Records a release of `target` answered at `now`, `round_trip` after it was sent:
    /// `others_waiting` marks it, a release that found nobody else waiting clears it.
    pub(crate) fn released(
        &self,
        target: &Target,
        others_waiting: bool,
        now: Instant,
        round_trip: Duration,
    ) {
        if !others_waiting && !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut marks = self.marks.lock();
        if others_waiting {
            let wait = round_trip
                .saturating_mul(ROUND_TRIPS)
                .clamp(HANDOFF_AFTER, MAX_STEP_ASIDE);
            if marks.len() >= MAX_MARKS {
                marks.retain(|_, mark| now.saturating_duration_since(mark.seen_at) < FORGET_AFTER);
            }
            let mark = Mark {
                until: now + wait,
                seen_at: now,
            };
            marks.insert(target.clone(), mark);
        } else {
            marks.remove(target);
        }
        self.any.store(!marks.is_empty(), Ordering::Release);
    }

    /// Until when a new attempt on `target` waits for other clients' waiters, if it does.
    pub(crate) fn wait_until(&self, target: &Target, now: Instant) -> Option<Instant> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let until = self.marks.lock().get(target)?.until;
        (now < until).then_some(until)
    }

    /// Whether other clients were waiting for `target` at this client's last release: its
    /// next release goes through the store rather than to a waiter of this client.
    pub(crate) fn others_waiting(&self, target: &Target) -> bool {
        self.any.load(Ordering::Acquire) && self.marks.lock().contains_key(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::LockKind;

    fn target(name: &str) -> Target {
        Target::new(name.into(), LockKind::Reentrant)
    }

    #[test]
    fn a_release_others_waited_for_marks_the_lock_until_one_that_nobody_did() {
        let aside = StepAside::default();
        let now = Instant::now();
        let lock = target("a");
        assert_eq!(aside.wait_until(&lock, now), None);
        aside.released(&lock, true, now, Duration::from_millis(1));
        assert_eq!(
            aside.wait_until(&lock, now),
            Some(now + Duration::from_millis(4))
        );
        assert_eq!(
            aside.wait_until(&lock, now + Duration::from_millis(4)),
            None
        );
        assert!(aside.others_waiting(&lock));
        assert!(!aside.others_waiting(&target("b")));
        aside.released(&lock, false, now, Duration::from_millis(1));
        assert!(!aside.others_waiting(&lock));
        assert_eq!(aside.wait_until(&lock, now), None);
    }

    #[test]
    fn the_wait_is_a_few_round_trips_within_bounds() {
        let aside = StepAside::default();
        let now = Instant::now();
        let lock = target("a");
        aside.released(&lock, true, now, Duration::from_micros(1));
        assert_eq!(aside.wait_until(&lock, now), Some(now + HANDOFF_AFTER));
        aside.released(&lock, true, now, Duration::from_secs(1));
        assert_eq!(aside.wait_until(&lock, now), Some(now + MAX_STEP_ASIDE));
    }

    #[test]
    fn old_marks_are_forgotten_when_there_are_many() {
        let aside = StepAside::default();
        let long_ago = Instant::now();
        for index in 0..MAX_MARKS {
            aside.released(&target(&index.to_string()), true, long_ago, Duration::ZERO);
        }
        let now = long_ago + FORGET_AFTER;
        aside.released(&target("new"), true, now, Duration::ZERO);
        assert_eq!(aside.marks.lock().len(), 1);
        assert!(aside.others_waiting(&target("new")));
    }
}
