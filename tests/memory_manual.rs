//! The conformance suite on the memory backend driven by a `ManualClock`, plus what only virtual
//! time can show: things happen at exactly the instant the clock reaches, and no test sleeps.

mod conformance;
mod support;

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlock::testing::{Fault, FaultyBackend, Op};
use dlock::{LockClient, LockClientBuilder};
use support::env::{ManualMemory, TestEnv};

conformance_suite!(support::env::ManualMemory::new);

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_wait_ends_exactly_at_its_deadline() {
    let env = ManualMemory::new();
    let holder = env.client();
    let _held = holder
        .lock("exact-wait")
        .lock_with_lease(Duration::from_secs(100))
        .expect("lock");
    let waiter = env.client();
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let got = waiter
            .lock("exact-wait")
            .try_lock_for(Duration::from_secs(5))
            .expect("wait");
        let _ = done.send(got.is_some());
    });
    env.await_sleepers(1);
    env.advance(Duration::from_secs(5) - MS);
    assert_eq!(
        env.clock.sleepers(),
        1,
        "still waiting 1 ms before the deadline"
    );
    assert!(result.try_recv().is_err());
    env.advance(MS);
    assert_eq!(result.recv(), Ok(false), "gave up at the deadline");
}

#[test]
fn a_lease_ends_exactly_when_it_runs_out() {
    let env = ManualMemory::new();
    let client = env.client();
    let lock = client.lock("exact-lease");
    let guard = lock.lock_with_lease(Duration::from_secs(3)).expect("lock");
    env.advance(Duration::from_secs(3) - MS);
    assert!(lock.is_locked().expect("held"));
    assert!(!guard.is_lost());
    env.advance(MS);
    assert!(!lock.is_locked().expect("expired"));
    assert!(guard.is_lost());
}

#[test]
fn the_watchdog_ticks_exactly_every_third_of_its_lease() {
    let env = ManualMemory::new();
    let client = env.client_with_watchdog(Duration::from_secs(6));
    let lock = client.lock("exact-tick");
    let guard = lock.lock().expect("lock");
    env.advance(Duration::from_secs(2) - MS);
    assert_eq!(client.watchdog_stats().batches, 0);
    env.advance(MS);
    assert_eq!(client.watchdog_stats().batches, 1, "ticked at lease/3");
    // Renewed at t = 2 s for 6 s: the lease now reaches t = 8 s, not t = 6 s.
    let deadline = guard.lease_deadline();
    env.advance(Duration::from_secs(2));
    assert_eq!(client.watchdog_stats().batches, 2);
    assert!(guard.lease_deadline() > deadline);
    let left = lock.remaining_lease().expect("ttl").expect("held");
    assert_eq!(left, Duration::from_secs(6), "renewed at this very instant");
    guard.unlock().expect("unlock");
}

#[test]
fn a_lock_left_by_a_dead_holder_is_free_exactly_at_its_lease_end() {
    let env = ManualMemory::new();
    env.client()
        .lock("dead")
        .lock_with_lease(Duration::from_secs(2))
        .expect("lock")
        .leak();
    let survivor = env.client();
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let lock = survivor.lock("dead");
        let got = lock.lock().expect("lock");
        let _ = done.send(got.unlock().is_ok());
    });
    env.await_sleepers(1);
    env.advance(Duration::from_secs(2) - MS);
    assert!(result.try_recv().is_err());
    env.advance(MS);
    assert_eq!(result.recv(), Ok(true));
}

#[test]
fn released_and_expired_locks_leave_no_state_behind() {
    let env = ManualMemory::new();
    let client = env.client();
    for i in 0..500 {
        client
            .lock(format!("n{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
        client
            .lock(format!("e{i}"))
            .lock_with_lease(Duration::from_secs(1))
            .expect("lock")
            .leak();
    }
    assert_eq!(env.backend.len(), 500);
    env.advance(Duration::from_secs(1));
    assert!(env.backend.is_empty());
}

/// A client with a 6 s watchdog lease whose calls pass through a fault injector.
fn faulty_client() -> (ManualMemory, FaultyBackend, LockClient) {
    let env = ManualMemory::new();
    let faulty = FaultyBackend::new(env.backend());
    let client = LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .expect("client");
    (env, faulty, client)
}

#[test]
fn a_failed_renewal_is_retried_within_the_lease() {
    let (env, faulty, client) = faulty_client();
    let lock = client.lock("flaky-renewal");
    let guard = lock.lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew).times(1));
    env.advance(Duration::from_secs(2));
    assert_eq!(client.watchdog_stats().failures, 1);
    assert!(!guard.is_lost());
    // Retried a quarter period later, not a whole one.
    env.advance(Duration::from_millis(500));
    assert_eq!(client.watchdog_stats().renewed, 1);
    assert_eq!(
        lock.remaining_lease().expect("ttl"),
        Some(Duration::from_secs(6))
    );
    guard.unlock().expect("unlock");
}

#[test]
fn an_unreachable_backend_loses_the_guard_when_its_lease_runs_out() {
    let (env, faulty, client) = faulty_client();
    let lock = client.lock("unreachable");
    let guard = lock.lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew));
    let step = Duration::from_millis(500);
    // Ticks at 2 s, then retries every 0.5 s: lost at the first retry at or past 6 s, not before.
    while env.clock.elapsed() < Duration::from_secs(6) - step {
        env.advance(step);
        assert!(!guard.is_lost(), "lost before the lease ran out");
        assert_eq!(client.watchdog_stats().lost, 0);
    }
    env.advance(step);
    assert_eq!(client.watchdog_stats().lost, 1);
    assert!(client.watchdog_stats().failures >= 8, "kept trying");
    assert!(guard.is_lost());
    assert!(guard.unlock().expect_err("lost").is_not_held());
}
