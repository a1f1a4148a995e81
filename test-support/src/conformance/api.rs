//! The handle's everyday calls.

use std::thread;

use super::unique;
use crate::env::TestEnv;

pub fn uncontended_lock_and_release(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("plain"));
    assert!(!lock.is_locked().expect("is_locked"));
    let guard = lock.lock().expect("lock");
    assert!(lock.is_locked().expect("is_locked"));
    assert!(lock.is_held_by_current_thread().expect("held"));
    assert_eq!(lock.hold_count().expect("count"), 1);
    assert!(!guard.is_lost());
    drop(guard);
    assert!(!lock.is_locked().expect("is_locked"));
    assert!(!lock.is_held_by_current_thread().expect("held"));
    assert_eq!(lock.hold_count().expect("count"), 0);
}

pub fn try_lock_is_none_while_another_owner_holds(env: &dyn TestEnv) {
    let name = unique("try");
    let (a, b) = (env.client(), env.client());
    let held = a.lock(name.clone()).lock().expect("lock");
    assert!(b.lock(name.clone()).try_lock().expect("try_lock").is_none());
    drop(held);
    assert!(b.lock(name).try_lock().expect("try_lock").is_some());
}

pub fn lock_excludes_across_clients_and_threads(env: &dyn TestEnv) {
    let name = unique("exclude");
    let client = env.client();
    let lock = client.lock(name.clone());
    let _held = lock.lock().expect("lock");
    // Another thread of the same client is another owner.
    let other_thread = thread::scope(|s| {
        s.spawn(|| lock.try_lock().expect("try_lock").is_some())
            .join()
            .expect("thread")
    });
    assert!(!other_thread);
    // Another client (another process) too.
    assert!(env
        .client()
        .lock(name)
        .try_lock()
        .expect("try_lock")
        .is_none());
}

pub fn remaining_lease_reports_the_holders_lease(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("ttl"));
    assert_eq!(lock.remaining_lease().expect("free"), None);
    let lease = env.unit() * 20;
    let _guard = lock.lock_with_lease(lease).expect("lock");
    let left = lock.remaining_lease().expect("ttl").expect("some lease");
    assert!(
        left <= lease && left > lease / 2,
        "remaining {left:?} of {lease:?}"
    );
    env.advance(env.unit() * 5);
    let later = lock.remaining_lease().expect("ttl").expect("some lease");
    assert!(
        later < left,
        "the lease should shrink: {later:?} after {left:?}"
    );
}

pub fn force_unlock_frees_and_wakes(env: &dyn TestEnv) {
    let name = unique("force");
    let holder = env.client();
    let lock = holder.lock(name.clone());
    let guard = lock.lock_with_lease(env.unit() * 1000).expect("lock");
    let waiter_client = env.client();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let lock = waiter_client.lock(name.clone());
            let got = lock.try_lock_for(env.unit() * 500).expect("wait");
            got.is_some()
        });
        env.await_sleepers(1);
        assert!(env
            .client()
            .lock(name.clone())
            .force_unlock()
            .expect("force"));
        assert!(
            waiter.join().expect("waiter"),
            "the waiter is woken by the forced release"
        );
    });
    assert!(!lock.is_held_by_current_thread().expect("held"));
    assert!(guard.is_lost(), "the holder learns its lock was taken");
    assert!(guard.unlock().is_err());
    assert!(
        !env.client().lock(name).force_unlock().expect("force"),
        "nothing left to force"
    );
}

pub fn explicit_unlock_reports_success(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("unlock"));
    lock.lock().expect("lock").unlock().expect("unlock");
    lock.lock_with_lease(env.unit() * 10)
        .expect("lock")
        .unlock()
        .expect("unlock");
    assert!(!lock.is_locked().expect("is_locked"));
}

pub fn leaked_guard_is_released_by_lock_unlock(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("leak"));
    lock.lock().expect("lock").leak();
    assert!(lock.is_held_by_current_thread().expect("held"));
    lock.unlock().expect("unlock");
    assert!(!lock.is_locked().expect("is_locked"));
    assert!(lock.unlock().expect_err("nothing held").is_not_held());
}
