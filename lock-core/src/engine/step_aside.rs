//! A client's turn for other clients' waiters, on locks the store keeps no queue for.
//!
//! Threads of one client take turns through the client's own queue. Waiters of other clients
//! (other processes) learn of a release only from the store's message, which reaches them
//! after the releasing thread's next attempt has already reached the store: a thread looping
//! on a lock would take it again nearly every time, and a process could keep it for tens of
//! milliseconds while another waits.
//!
//! So when a release answers that other clients were waiting
//! ([`Release::ReleasedToOthers`](crate::contract::backend::Release::ReleasedToOthers)), this client's
//! next attempts on that lock first wait a short while (until a release message comes, or a
//! few round trips have passed) for one of those waiters to take it; and its releases go
//! through the store, where every waiter hears them, rather than straight to a waiter of its
//! own, until a release finds nobody else waiting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use crate::contract::kind::Target;
use crate::engine::wait_queue::HANDOFF_AFTER;

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
    /// The releases' round trip, smoothed: one slow release (a scheduling hiccup) does not
    /// stretch the turns.
    round_trip: Mutex<Option<Duration>>,
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    /// Until when new attempts wait before trying.
    until: Instant,
    /// Until when this client's own release message may still be on its way.
    own_message_by: Instant,
}

/// Other clients' turn on a lock, as a waiter of this client finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Until when the waiter waits before trying (unless a release comes).
    pub(crate) until: Instant,
    /// The client's own release message may not have come yet: the first message to arrive
    /// may be that one, not a release by another client.
    pub(crate) own_message_due: bool,
}

impl StepAside {
    /// Records a release of `target` sent at `sent_at` and answered now (read from `now` only
    /// when needed): `others_waiting` marks it, a release that found nobody else waiting
    /// clears it.
    pub(crate) fn released(
        &self,
        target: &Target,
        others_waiting: bool,
        sent_at: Instant,
        now: impl FnOnce() -> Instant,
    ) {
        if !others_waiting && !self.any.load(Ordering::Acquire) {
            return;
        }
        let now = now();
        if !others_waiting {
            let mut marks = self.marks.lock();
            marks.remove(target);
            self.any.store(!marks.is_empty(), Ordering::Release);
            return;
        }
        let round_trip = self.smoothed(now.saturating_duration_since(sent_at));
        let wait = round_trip
            .saturating_mul(ROUND_TRIPS)
            .clamp(HANDOFF_AFTER, MAX_STEP_ASIDE);
        let mark = Mark {
            until: now + wait,
            own_message_by: now + round_trip,
        };
        let mut marks = self.marks.lock();
        if marks.len() >= MAX_MARKS {
            marks.retain(|_, mark| now.saturating_duration_since(mark.until) < FORGET_AFTER);
        }
        marks.insert(target.clone(), mark);
        self.any.store(true, Ordering::Release);
    }

    /// Folds `sample` into the smoothed round trip and returns it: 7/8 of the old and 1/8 of
    /// the new, taken as at most twice the old, so a spike moves it by an eighth at most while
    /// a network that got slower is followed within a few dozen releases.
    fn smoothed(&self, sample: Duration) -> Duration {
        let mut round_trip = self.round_trip.lock();
        let smoothed = match *round_trip {
            Some(old) => (old * 7 + sample.min(old * 2)) / 8,
            None => sample,
        };
        *round_trip = Some(smoothed);
        smoothed
    }

    /// Other clients' turn on `target` at `now`, if it is not over.
    pub(crate) fn turn(&self, target: &Target, now: Instant) -> Option<Turn> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mark = *self.marks.lock().get(target)?;
        (now < mark.until).then_some(Turn {
            until: mark.until,
            own_message_due: now < mark.own_message_by,
        })
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
    use crate::contract::kind::LockKind;

    fn target(name: &str) -> Target {
        Target::new(name.into(), LockKind::Reentrant)
    }

    fn until(aside: &StepAside, lock: &Target, now: Instant) -> Option<Instant> {
        aside.turn(lock, now).map(|turn| turn.until)
    }

    #[test]
    fn a_release_others_waited_for_marks_the_lock_until_one_that_nobody_did() {
        let aside = StepAside::default();
        let now = Instant::now() + Duration::from_secs(1);
        let sent_at = now - Duration::from_millis(1);
        let lock = target("a");
        assert_eq!(aside.turn(&lock, now), None);
        aside.released(&lock, true, sent_at, || now);
        let four_round_trips = now + Duration::from_millis(4);
        assert_eq!(
            aside.turn(&lock, now),
            Some(Turn {
                until: four_round_trips,
                own_message_due: true
            })
        );
        let later = now + Duration::from_millis(1);
        assert_eq!(
            aside.turn(&lock, later).map(|t| t.own_message_due),
            Some(false)
        );
        assert_eq!(aside.turn(&lock, four_round_trips), None);
        assert!(aside.others_waiting(&lock));
        assert!(!aside.others_waiting(&target("b")));
        aside.released(&lock, false, sent_at, || now);
        assert!(!aside.others_waiting(&lock));
        assert_eq!(aside.turn(&lock, now), None);
    }

    #[test]
    fn the_wait_is_a_few_smoothed_round_trips_within_bounds() {
        let aside = StepAside::default();
        let now = Instant::now() + Duration::from_secs(10);
        let lock = target("a");
        aside.released(&lock, true, now - Duration::from_micros(1), || now);
        assert_eq!(until(&aside, &lock, now), Some(now + HANDOFF_AFTER));
        // One slow release among fast ones barely moves it.
        for _ in 0..8 {
            aside.released(&lock, true, now - Duration::from_millis(1), || now);
        }
        aside.released(&lock, true, now - Duration::from_secs(1), || now);
        let turn = until(&aside, &lock, now).expect("a turn");
        assert!(turn < now + Duration::from_millis(10), "{:?}", turn - now);
        // A network that got slower stretches it, up to the bound.
        for _ in 0..200 {
            aside.released(&lock, true, now - Duration::from_secs(1), || now);
        }
        assert_eq!(until(&aside, &lock, now), Some(now + MAX_STEP_ASIDE));
    }

    #[test]
    fn old_marks_are_forgotten_when_there_are_many() {
        let aside = StepAside::default();
        let long_ago = Instant::now();
        for index in 0..MAX_MARKS {
            aside.released(&target(&index.to_string()), true, long_ago, || long_ago);
        }
        let now = long_ago + FORGET_AFTER + Duration::from_secs(1);
        aside.released(&target("new"), true, now, || now);
        assert_eq!(aside.marks.lock().len(), 1);
        assert!(aside.others_waiting(&target("new")));
    }
}
