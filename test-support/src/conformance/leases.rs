//! Fixed leases: expiry hands the lock on, and the late holder is told.

use std::thread;

use super::unique;
use crate::env::TestEnv;

pub fn fixed_lease_expires_and_a_waiter_gets_it(env: &dyn TestEnv) {
    let name = unique("lease");
    let unit = env.unit();
    let holder = env.client();
    let lock = holder.lock(name.clone());
    let guard = lock.lock_with_lease(unit * 3).expect("lock");
    let waiter = env.client();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let lock = waiter.lock(name.clone());
            let got = lock.try_lock_for(unit * 100).expect("wait");
            got.map(|guard| {
                guard.leak(); // keep holding after this thread ends
            })
            .is_some()
        });
        env.await_sleepers(1);
        if env.is_virtual_time() {
            // On a real clock a starved test thread may already be past the lease here.
            assert!(!guard.is_lost());
        }
        env.advance(unit * 4);
        assert!(
            waiting.join().expect("waiter"),
            "the waiter gets the lock once the lease ends"
        );
    });
    assert!(guard.is_lost());
    assert!(lock.is_locked().expect("held by the waiter"));
}

pub fn unlock_after_expiry_is_an_error_and_spares_the_new_holder(env: &dyn TestEnv) {
    let name = unique("late-unlock");
    let unit = env.unit();
    let holder = env.client();
    let lock = holder.lock(name.clone());
    let guard = lock.lock_with_lease(unit * 2).expect("lock");
    env.advance(unit * 3);
    assert!(guard.is_lost());
    let next = env.client();
    let next_lock = next.lock(name.clone());
    let next_guard = next_lock
        .try_lock()
        .expect("try")
        .expect("free after expiry");
    let error = guard.unlock().expect_err("the lease had expired");
    assert!(error.is_not_held(), "{error}");
    assert!(
        next_lock.is_held_by_current_thread().expect("held"),
        "a late unlock must not release the new holder"
    );
    next_guard.unlock().expect("unlock");

    // The same thread re-taking its lock after expiry gets a new hold; the old guard stays lost
    // and its release leaves the new hold alone.
    let old = lock.lock_with_lease(unit * 2).expect("lock");
    env.advance(unit * 3);
    let new = lock.lock_with_lease(unit * 100).expect("re-lock");
    assert!(old.is_lost());
    assert!(old.unlock().is_err());
    assert!(!new.is_lost());
    assert!(lock.is_held_by_current_thread().expect("held"));
    new.unlock().expect("unlock");
}

pub fn dead_holder_is_replaced_after_its_lease(env: &dyn TestEnv) {
    let name = unique("dead-holder");
    let unit = env.unit();
    {
        // A holder that dies: its client is gone and nothing unlocks.
        let doomed = env.client();
        doomed
            .lock(name.clone())
            .lock_with_lease(unit * 3)
            .expect("lock")
            .leak();
    }
    let survivor = env.client();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let lock = survivor.lock(name.clone());
            let guard = lock.lock().expect("lock after the lease");
            guard.unlock().is_ok()
        });
        env.await_sleepers(1);
        env.advance(unit * 4);
        assert!(waiting.join().expect("waiter"));
    });
}
