//! A client's local wait queue: no lock is held while the backend subscribes (a slow backend
//! never blocks other lock names, or releases and acquires of the same one), one head per lock
//! at any time, and first come, first served within a client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlock_test_support::wait_queue;
use dlocks::testing::FaultyBackend;
use dlocks::{LockClient, ManualClock, MemoryBackend};
use parking_lot::Mutex;

#[test]
fn a_slow_subscription_blocks_nothing_else_in_memory() {
    wait_queue::a_slow_subscription_blocks_nothing_else(Arc::new(MemoryBackend::new()));
}

/// Many threads of one client racing to join, time out and release on one lock: one head
/// subscribed at a time (not one subscription per waiter), never two holders, and every call
/// returns.
#[test]
fn join_timeout_and_release_races_keep_one_head_and_exclusion() {
    const THREADS: usize = 24;
    const ROUNDS: usize = 300;
    let faulty = FaultyBackend::new(MemoryBackend::new());
    let client = LockClient::new(faulty.clone());
    let name = format!("race:{}", uuid::Uuid::new_v4());
    let inside = AtomicUsize::new(0);
    let acquired = AtomicUsize::new(0);
    let timed_out = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..THREADS {
            let lock = client.lock(name.clone());
            let (inside, acquired, timed_out) = (&inside, &acquired, &timed_out);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t as u64);
                for _ in 0..ROUNDS {
                    let wait = Duration::from_micros(rng.u64(0..1500));
                    match lock.try_lock_for(wait).expect("try_lock_for") {
                        Some(guard) => {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                            if rng.bool() {
                                thread::yield_now();
                            }
                            inside.fetch_sub(1, Ordering::SeqCst);
                            guard.unlock().expect("unlock");
                            acquired.fetch_add(1, Ordering::SeqCst);
                        }
                        None => {
                            timed_out.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            });
        }
    });
    let (acquired, timed_out) = (acquired.into_inner(), timed_out.into_inner());
    assert_eq!(
        acquired + timed_out,
        THREADS * ROUNDS,
        "every call returned"
    );
    assert!(
        acquired > THREADS,
        "the lock changed hands: {acquired} acquisitions"
    );
    assert!(timed_out > 0, "waits ran out too: the races happened");
    // A queue whose last waiter leaves drops its subscription outside its locks, so the head
    // of the next queue may subscribe before that drop ends: two at once, never more.
    let peak = faulty.peak_subscriptions(&name);
    assert!(
        (1..=2).contains(&peak),
        "one head subscribed at a time, not every waiter: {peak} at once"
    );
    assert!(!client.lock(name).is_locked().expect("status"));
}

/// First come, first served within a client, under random waits and time-outs, on a manual
/// clock so every round is exact: when the holder releases, the waiters still waiting get the
/// lock in the order they arrived, and the ones whose wait ran out before have left.
#[test]
fn waiters_of_one_client_are_served_in_arrival_order_despite_time_outs() {
    const ROUNDS: u64 = 1000;
    for round in 0..ROUNDS {
        let mut rng = fastrand::Rng::with_seed(round);
        let clock = ManualClock::new();
        let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
        let lock = client.lock("fifo");
        let holder = lock
            .lock_with_lease(Duration::from_secs(3600))
            .expect("hold");
        let waiters = rng.usize(2..7);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        let mut waits = Vec::new();
        for index in 0..waiters {
            // Waits in whole seconds from 1 to 20, distinct from the release instant below.
            let wait = Duration::from_secs(rng.u64(1..=20));
            waits.push(wait);
            let (lock, order) = (lock.clone(), order.clone());
            threads.push(thread::spawn(move || {
                if let Some(guard) = lock.try_lock_for(wait).expect("wait") {
                    order.lock().push(index);
                    guard.unlock().expect("unlock");
                }
            }));
            // The next one arrives only once this one is queued.
            assert!(
                clock.wait_for_sleepers(index + 1),
                "round {round}: waiter {index} queued"
            );
        }
        // Time passes (some waits run out, in the middle of the queue too), then the release.
        let release_at = Duration::from_secs(rng.u64(0..=20)) + Duration::from_millis(500);
        clock.advance(release_at);
        holder.unlock().expect("release");
        for thread in threads {
            thread.join().expect("waiter");
        }
        let expected: Vec<usize> = (0..waiters).filter(|i| waits[*i] > release_at).collect();
        assert_eq!(
            *order.lock(),
            expected,
            "round {round}: waits {waits:?}, released at {release_at:?}"
        );
    }
}
