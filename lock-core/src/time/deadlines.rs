//! Wakers woken at an instant: what a future waiting on the system clock sleeps on, as a
//! blocked thread sleeps on a timed condition variable. One thread for the whole process,
//! started by the first such wait and ended after a while without any.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::task::Waker;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long the thread stays without any deadline before it ends.
const IDLE: Duration = Duration::from_secs(5);

/// A waker to wake at an instant: its place in the schedule, until it is woken or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    at: Instant,
    number: u64,
}

#[derive(Default)]
struct Service {
    state: Mutex<State>,
    /// Notified when an earlier deadline is scheduled.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    wakers: BTreeMap<Key, Waker>,
    next_number: u64,
    /// The thread is running (or starting).
    running: bool,
}

fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(Service::default)
}

/// Wakes `waker` at `at` (real time, `Instant`), unless [`cancel`]led first.
pub(crate) fn wake_at(at: Instant, waker: &Waker) -> Key {
    let shared = service();
    let mut state = shared.state.lock();
    let key = Key {
        at,
        number: state.next_number,
    };
    state.next_number += 1;
    let earliest = state.wakers.keys().next().is_none_or(|first| key < *first);
    state.wakers.insert(key, waker.clone());
    if !state.running {
        let started = std::thread::Builder::new()
            .name("dlock-timers".into())
            .spawn(|| service().run());
        match started {
            Ok(_) => state.running = true,
            Err(error) => {
                // Without the thread nothing would wake the future at its deadline: it is
                // woken now instead, and polls (and comes here) again.
                tracing::warn!(%error, "dlock: no thread for the timers of waiting futures");
                state.wakers.remove(&key);
                waker.wake_by_ref();
            }
        }
    } else if earliest {
        shared.changed.notify_one();
    }
    key
}

/// Wakes `waker` at `at` once, however many times it asks for that instant: for waits that
/// cannot cancel what they asked (the default of [`Timer::poll_wait`](super::clock::Timer::poll_wait)).
pub(crate) fn wake_once_at(at: Instant, waker: &Waker) {
    {
        let state = service().state.lock();
        let from = Key { at, number: 0 };
        let to = Key {
            at,
            number: u64::MAX,
        };
        if state
            .wakers
            .range(from..=to)
            .any(|(_, kept)| kept.will_wake(waker))
        {
            return;
        }
    }
    wake_at(at, waker);
}

/// Forgets the waker scheduled as `key`, if it was not woken yet.
pub(crate) fn cancel(key: Key) {
    service().state.lock().wakers.remove(&key);
}

impl Service {
    fn run(&self) {
        let mut state = self.state.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = state.wakers.first_entry() {
                if entry.key().at > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                // Woken outside the lock: a woken future may be polled (and ask again) at once.
                parking_lot::MutexGuard::unlocked(&mut state, || {
                    due.into_iter().for_each(Waker::wake);
                });
                continue;
            }
            match state.wakers.keys().next().map(|key| key.at) {
                Some(at) => {
                    self.changed.wait_until(&mut state, at);
                }
                None => {
                    if self.changed.wait_for(&mut state, IDLE).timed_out()
                        && state.wakers.is_empty()
                    {
                        state.running = false;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(count: &Count, value: usize) {
        let limit = Instant::now() + Duration::from_secs(10);
        while count.0.load(Ordering::SeqCst) < value && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn wakers_are_woken_at_their_instant_unless_cancelled() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let start = Instant::now();
        let cancelled = wake_at(start + Duration::from_millis(10), &waker);
        cancel(cancelled);
        wake_at(start + Duration::from_millis(30), &waker);
        wake_once_at(start + Duration::from_millis(20), &waker);
        wake_once_at(start + Duration::from_millis(20), &waker);
        wait_for(&count, 2);
        assert!(start.elapsed() >= Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "one wake per instant asked"
        );
    }
}
