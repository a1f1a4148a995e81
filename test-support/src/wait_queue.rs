//! A client's local wait queue on any backend: while the backend subscribes for a lock's head
//! waiter, no lock of the client's is held, so a slow subscription blocks nothing else.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::LockClient;
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
pub fn a_slow_subscription_blocks_nothing_else(backend: Arc<dyn DistributedLock>) {
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
