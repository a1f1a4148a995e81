//! A client's local wait queue: no lock is held while the backend subscribes (a slow backend
//! never blocks other lock names, or releases and acquires of the same one), one head per lock
//! at any time, and first come, first served within a client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{LockClient, ManualClock, MemoryBackend};
use parking_lot::Mutex;

/// Bound on an operation that must not wait for the slow subscription (2 s): it tests that
/// nothing blocks, not speed, so it leaves room for a loaded machine.
const UNBLOCKED: Duration = Duration::from_millis(1000);

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = f();
    let took = started.elapsed();
    assert!(
        took < UNBLOCKED,
        "{what} took {took:?}: it waited for the slow subscription"
    );
    result
}

/// With `subscribe` taking 2 s on lock A, everything else on A and on B goes on unhindered.
fn a_slow_subscription_blocks_nothing_else(backend: Arc<dyn DistributedLock>) {
    let faulty = FaultyBackend::new(backend);
    let (subscribing_tx, subscribing) = mpsc::channel();
    let subscribing_tx = Mutex::new(subscribing_tx);
    faulty.observe(move |call| {
        if call.op == Op::Subscribe {
            let _ = subscribing_tx.lock().send(());
        }
    });
    let prefix = uuid::Uuid::new_v4();
    let (a, b) = (format!("slow-a:{prefix}"), format!("slow-b:{prefix}"));
    faulty.inject(Fault::delay(Op::Subscribe, Duration::from_secs(2)).on_lock(a.clone()));
    let client = LockClient::new(faulty.clone());
    let lock_a = client.lock(a.clone());
    let lock_b = client.lock(b.clone());

    let held = lock_a.lock().expect("hold A");
    thread::scope(|s| {
        // The head of A's queue: its subscription takes 2 s.
        let head = s.spawn(|| {
            let guard = lock_a
                .try_lock_for(Duration::from_secs(20))
                .expect("wait for A")
                .expect("A in the end");
            guard.unlock().expect("unlock A");
        });
        subscribing
            .recv_timeout(Duration::from_secs(5))
            .expect("the head subscribes");

        // Another waiter on A joins behind the head and gives up: leaving the queue must not
        // wait for the head's subscription.
        let behind = s.spawn(|| {
            timed("a waiter on A timing out", || {
                assert!(lock_a
                    .try_lock_for(Duration::from_millis(20))
                    .expect("wait")
                    .is_none());
            })
        });
        behind.join().expect("the waiter behind");

        // Every operation on B.
        timed("lock B", || {
            lock_b.lock().expect("lock B").unlock().expect("unlock B")
        });
        timed("try_lock B", || {
            drop(lock_b.try_lock().expect("try B").expect("B is free"))
        });
        timed("is_locked B", || lock_b.is_locked().expect("status B"));
        timed("force_unlock B", || lock_b.force_unlock().expect("force B"));

        // A released by its holder, taken and released by another thread.
        timed("release A", || held.unlock().expect("unlock A"));
        s.spawn(|| {
            timed("take and release A on another thread", || {
                if let Some(guard) = lock_a.try_lock().expect("try A") {
                    guard.unlock().expect("unlock A");
                }
            })
        })
        .join()
        .expect("other thread");

        head.join().expect("the head gets A once subscribed");
    });
    assert_eq!(
        faulty.peak_subscriptions(&a),
        1,
        "one head, one subscription"
    );
}

#[test]
fn a_slow_subscription_blocks_nothing_else_in_memory() {
    a_slow_subscription_blocks_nothing_else(Arc::new(MemoryBackend::new()));
}

#[cfg(feature = "redis")]
#[test]
fn a_slow_subscription_blocks_nothing_else_on_redis() {
    let server = dlock_test_support::redis_server::RedisServer::start();
    a_slow_subscription_blocks_nothing_else(Arc::new(server.backend()));
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
