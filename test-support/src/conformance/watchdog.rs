//! The watchdog: one thread per client, one batch per tick, loss noticed, no resurrection.

use std::collections::HashSet;
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Duration;

use dlocks::backend::{Acquire, AcquireRequest, HoldRef, LockRef, OwnerId, Release, Renewal};
use dlocks::testing::{FaultyBackend, Op};
use dlocks::LockClientBuilder;
use parking_lot::Mutex;

use super::unique;
use crate::env::TestEnv;

/// Lets time pass in steps of a little more than a third of `lease`: one watchdog tick each.
fn run_ticks(env: &dyn TestEnv, lease: Duration, ticks: u32) {
    for _ in 0..ticks {
        env.advance(lease / 3 + lease / 30);
    }
}

pub fn watchdog_keeps_a_long_hold_alive(env: &dyn TestEnv) {
    let name = unique("watchdog-long");
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let lock = client.lock(name.clone());
    let guard = lock.lock().expect("lock");
    // Four leases' worth of time.
    run_ticks(env, lease, 12);
    assert!(!guard.is_lost());
    assert!(lock.is_held_by_current_thread().expect("held"));
    assert!(env
        .client()
        .lock(name.clone())
        .try_lock()
        .expect("try")
        .is_none());
    let stats = client.watchdog_stats();
    assert!(stats.renewed >= 8, "renewed {} times", stats.renewed);
    assert_eq!(stats.lost, 0);
    guard.unlock().expect("unlock");
}

pub fn dropping_the_guard_stops_renewal(env: &dyn TestEnv) {
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let lock = client.lock(unique("watchdog-stop"));
    let guard = lock.lock().expect("lock");
    run_ticks(env, lease, 2);
    drop(guard);
    assert_eq!(client.watchdog_stats().holds, 0);
    let batches = client.watchdog_stats().batches;
    env.advance(lease * 2);
    assert_eq!(
        client.watchdog_stats().batches,
        batches,
        "no renewal after release"
    );
    assert!(!lock.is_locked().expect("is_locked"));
}

pub fn one_renewal_thread_batches_all_holds_per_tick(env: &dyn TestEnv) {
    const HOLDS: usize = 50;
    let lease = env.unit() * 6;
    let observed = FaultyBackend::new(env.backend());
    let renewals: Arc<Mutex<Vec<(ThreadId, usize)>>> = Arc::default();
    {
        let renewals = renewals.clone();
        observed.observe(move |call| {
            if call.op == Op::Renew {
                renewals.lock().push((call.thread, call.names.len()));
            }
        });
    }
    let client = LockClientBuilder::new(Arc::new(observed))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let prefix = unique("batch");
    let locks: Vec<_> = (0..HOLDS)
        .map(|i| client.lock(format!("{prefix}:{i}")))
        .collect();
    // Holds taken on several threads, all kept (leaked) for the test.
    thread::scope(|s| {
        for chunk in locks.chunks(10) {
            s.spawn(move || {
                for lock in chunk {
                    lock.lock().expect("lock").leak();
                }
            });
        }
    });
    // Only ticks after every hold was taken carry all of them.
    let before = renewals.lock().len();
    run_ticks(env, lease, 3);
    let renewals = renewals.lock()[before..].to_vec();
    assert!(renewals.len() >= 2, "{} ticks", renewals.len());
    let threads: HashSet<ThreadId> = renewals.iter().map(|(thread, _)| *thread).collect();
    assert_eq!(threads.len(), 1, "one renewal thread per client");
    assert!(!threads.contains(&thread::current().id()));
    for (_, batch) in &renewals {
        assert_eq!(*batch, HOLDS, "every hold renewed in one call per tick");
    }
    let stats = client.watchdog_stats();
    assert!(
        stats.batches as usize >= renewals.len(),
        "one backend call per tick"
    );
    assert_eq!(stats.holds as usize, HOLDS);
    for lock in &locks {
        lock.force_unlock().expect("clean up");
    }
}

pub fn renewal_finding_the_lock_gone_marks_the_guard_lost(env: &dyn TestEnv) {
    let name = unique("watchdog-gone");
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let lock = client.lock(name.clone());
    let guard = lock.lock().expect("lock");
    assert!(env
        .client()
        .lock(name.clone())
        .force_unlock()
        .expect("force"));
    let newcomer = env.client();
    let new_lock = newcomer.lock(name.clone());
    let new_guard = new_lock
        .lock_with_lease(env.unit() * 100)
        .expect("new holder");
    // The next tick finds it gone: lost long before the old lease would have run out. (On a
    // real clock a starved watchdog may tick late: allow it a few more periods.)
    run_ticks(env, lease, 1);
    for _ in 0..5 {
        if client.watchdog_stats().lost == 1 || env.is_virtual_time() {
            break;
        }
        run_ticks(env, lease, 1);
    }
    assert_eq!(client.watchdog_stats().lost, 1, "the renewal found it gone");
    assert!(guard.is_lost());
    assert!(guard.unlock().expect_err("lost").is_not_held());
    assert!(
        new_lock.is_held_by_current_thread().expect("held"),
        "the new holder is untouched"
    );
    new_guard.unlock().expect("unlock");
}

pub fn renewal_never_resurrects_a_released_lock(env: &dyn TestEnv) {
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let name = unique("no-resurrection");
    let lock = client.lock(name.clone());
    for _ in 0..50 {
        lock.lock().expect("lock").unlock().expect("unlock");
    }
    assert_eq!(client.watchdog_stats().holds, 0);
    env.advance(lease);
    assert!(!lock.is_locked().expect("is_locked"));
    // The backend contract underneath: renewing a released hold reports it gone.
    let backend = env.backend();
    let owner = super::new_owner();
    let lock = LockRef::reentrant(&name);
    assert!(backend
        .try_acquire(&AcquireRequest::new(lock, &owner, lease))
        .expect("acquire")
        .is_acquired());
    assert_eq!(
        backend.release(lock, &owner).expect("release"),
        Release::Released
    );
    let renewed = backend
        .renew(
            &[HoldRef {
                lock,
                owner: &owner,
            }],
            lease,
        )
        .expect("renew");
    assert!(matches!(renewed[..], [Renewal::Lost(_)]), "{renewed:?}");
    assert!(!backend.status(lock, &owner).expect("status").locked);
}
