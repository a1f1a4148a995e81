//! When the store's revisions were seen: a write whose answer was lost, found later on the
//! store at revision R, landed before instant T if an answer that arrived by T showed a
//! revision of R or more. The backend needs that to tell an extend that landed while its hold
//! lasted (the hold counts on it) from one held up in the network past the hold's deadline
//! (nobody counts on it).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Samples kept, one per [`GRAIN`] at most: a minute and more of a busy backend's answers, a
/// watchdog lease or two (a hold's deadline older than the oldest sample is not proven, and
/// its move lengthens nothing).
const KEPT: usize = 4096;

/// Answers closer together than this share one sample, the later one's (sound: the later
/// revision was seen by the later instant).
const GRAIN: Duration = Duration::from_millis(15);

/// The revisions answers showed, with when they arrived, oldest first.
#[derive(Default)]
pub(crate) struct Revisions {
    seen: Mutex<VecDeque<(Instant, i64)>>,
}

impl Revisions {
    /// An answer showing `revision` arrived now.
    pub(crate) fn saw(&self, revision: i64) {
        let now = Instant::now();
        let mut seen = self.seen.lock();
        match seen.back_mut() {
            Some((_, last)) if *last >= revision => return,
            Some(last) if now.saturating_duration_since(last.0) < GRAIN => {
                *last = (now, revision);
                return;
            }
            _ => {}
        }
        if seen.len() == KEPT {
            seen.pop_front();
        }
        seen.push_back((now, revision));
    }

    /// The newest revision an answer showed.
    pub(crate) fn latest(&self) -> Option<i64> {
        self.seen.lock().back().map(|(_, revision)| *revision)
    }

    /// Whether revision `revision` had been written by `by`: an answer that arrived by then
    /// showed it or a later one. `false` when no sample kept says so.
    pub(crate) fn written_by(&self, revision: i64, by: Instant) -> bool {
        let seen = self.seen.lock();
        let before = seen.partition_point(|(at, _)| *at <= by);
        before > 0 && seen[before - 1].1 >= revision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_counts_as_written_by_the_arrival_of_an_answer_showing_it() {
        let revisions = Revisions::default();
        let before_any = Instant::now();
        revisions.saw(10);
        std::thread::sleep(GRAIN);
        let between = Instant::now();
        std::thread::sleep(GRAIN);
        revisions.saw(20);
        revisions.saw(15);
        assert!(!revisions.written_by(10, before_any));
        assert!(revisions.written_by(10, between));
        assert!(!revisions.written_by(11, between));
        assert!(revisions.written_by(20, Instant::now()));
        assert!(!revisions.written_by(21, Instant::now()));
    }
}
