//! The plain lock's waiters' places, as their refusals told them. A refusal that marked its
//! waiter answers how many live marks come before its own (`preamble/turns.lua`); each of those
//! waiters takes the lock and lets it go before this one's turn comes, and each such release is
//! announced on the name's channel. Until the channel has carried that many messages since
//! the refusal, a try of this waiter would be refused by another's turn: it is refused with no
//! call. Anything else announced (a Redisson client's release, a waiter that gave up, another
//! name's message counted alike) only brings the next try nearer; a waiter ahead that died is
//! outlived by its mark's end and the waiter's own retry. A try of its own writes the mark
//! again before it could lapse.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// At most this many places are remembered: past them, all are forgotten (each waiter makes its
/// next try).
const LIMIT: usize = 65_536;

/// A waiter's place, as its last refusal told it.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// The messages heard on the name's channel before that refusal was asked.
    heard_at: u64,
    /// The live marks before the waiter's own.
    ahead: u64,
    /// Its mark lives at least until then.
    mark_lasts: Instant,
}

/// The places of this backend's plain waiters, by name and waiter id.
#[derive(Debug, Default)]
pub(super) struct Places {
    places: Mutex<HashMap<(String, String), Place>>,
}

impl Places {
    /// Waiter `waiter` of `name` was refused behind `ahead` live marks, asked when `heard_at`
    /// messages had been heard, its mark living until `mark_lasts` at least.
    pub(super) fn told(
        &self,
        name: &str,
        waiter: &str,
        heard_at: u64,
        ahead: u64,
        mark_lasts: Instant,
    ) {
        let mut places = self.places.lock();
        if places.len() >= LIMIT {
            places.clear();
        }
        let place = Place {
            heard_at,
            ahead,
            mark_lasts,
        };
        places.insert((name.to_owned(), waiter.to_owned()), place);
    }

    /// The waiter took the lock, gave up, or has no place known.
    pub(super) fn forget(&self, name: &str, waiter: &str) {
        let mut places = self.places.lock();
        if !places.is_empty() {
            places.remove(&(name.to_owned(), waiter.to_owned()));
        }
    }

    /// Whether a try of waiter `waiter` of `name`, with `heard` messages heard now, would be
    /// refused by another's turn, while its mark lives `mark_left` more at least.
    pub(super) fn refuses(
        &self,
        name: &str,
        waiter: &str,
        heard: u64,
        mark_left: Duration,
    ) -> bool {
        let places = self.places.lock();
        if places.is_empty() {
            return false;
        }
        places
            .get(&(name.to_owned(), waiter.to_owned()))
            .is_some_and(|place| {
                heard.wrapping_sub(place.heard_at) < place.ahead
                    && place.mark_lasts.saturating_duration_since(Instant::now()) >= mark_left
            })
    }
}
