//! Reentrancy: per thread, counted, released at the last level.

use std::thread;

use super::unique;
use crate::env::TestEnv;

pub fn reentrant_holds_release_at_the_last(env: &dyn TestEnv) {
    let name = unique("reentrant");
    let client = env.client();
    let other = env.client();
    let lock = client.lock(name.clone());
    let first = lock.lock().expect("1");
    let second = lock.lock().expect("2");
    let third = lock.try_lock().expect("3").expect("re-entered");
    assert_eq!(lock.hold_count().expect("count"), 3);
    third.unlock().expect("unlock 3");
    assert_eq!(lock.hold_count().expect("count"), 2);
    assert!(other.lock(name.clone()).try_lock().expect("try").is_none());
    drop(second);
    assert_eq!(lock.hold_count().expect("count"), 1);
    assert!(other.lock(name.clone()).try_lock().expect("try").is_none());
    drop(first);
    assert_eq!(lock.hold_count().expect("count"), 0);
    assert!(!lock.is_locked().expect("is_locked"));
    assert!(other.lock(name).try_lock().expect("try").is_some());
}

pub fn another_thread_cannot_release(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("foreign"));
    let _a = lock.lock().expect("lock");
    let _b = lock.lock().expect("lock");
    thread::scope(|s| {
        s.spawn(|| {
            let error = lock.unlock().expect_err("not held by this thread");
            assert!(error.is_not_held(), "{error}");
            assert_eq!(lock.hold_count().expect("count"), 0);
        });
    });
    // Untouched by the failed release.
    assert!(lock.is_held_by_current_thread().expect("held"));
    assert_eq!(lock.hold_count().expect("count"), 2);
}

pub fn hold_counts_are_per_thread(env: &dyn TestEnv) {
    let client = env.client();
    let (one, two) = (client.lock(unique("a")), client.lock(unique("b")));
    let _x = one.lock().expect("lock");
    let _y = one.lock().expect("lock");
    thread::scope(|s| {
        s.spawn(|| {
            let _z = two.lock().expect("lock");
            assert_eq!(two.hold_count().expect("count"), 1);
            assert_eq!(one.hold_count().expect("count"), 0);
            assert!(!one.is_held_by_current_thread().expect("held"));
        });
    });
    assert_eq!(one.hold_count().expect("count"), 2);
    assert_eq!(two.hold_count().expect("count"), 0);
}

pub fn reentrant_try_lock_succeeds_without_waiting(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("try-reenter"));
    let _outer = lock.lock_with_lease(env.unit() * 50).expect("lock");
    let inner = lock
        .try_lock_with_lease(std::time::Duration::ZERO, env.unit() * 10)
        .expect("try")
        .expect("reentrant try succeeds at once");
    assert_eq!(lock.hold_count().expect("count"), 2);
    drop(inner);
    assert!(lock.is_held_by_current_thread().expect("held"));
}

pub fn reentrant_longer_lease_extends_the_hold(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("extend"));
    let unit = env.unit();
    let outer = lock.lock_with_lease(unit * 4).expect("outer");
    let inner = lock.lock_with_lease(unit * 40).expect("inner");
    env.advance(unit * 8);
    // The longer inner lease covers the hold past the outer lease's end.
    assert!(!outer.is_lost());
    assert!(!inner.is_lost());
    assert!(lock.is_held_by_current_thread().expect("held"));
    drop(inner);
    outer.unlock().expect("unlock");
    assert!(!lock.is_locked().expect("is_locked"));
}
