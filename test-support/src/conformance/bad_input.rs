//! Bad input: a clear `InvalidArgument`, never a panic, a hang or a change of state.

use std::time::Duration;

use dlocks::{HandOff, LockClientBuilder, LockError, LockKind, MAX_DURATION, MAX_NAME_LEN};

use super::unique;
use crate::env::TestEnv;

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, LockError>, argument: &str) {
    match result {
        Err(LockError::InvalidArgument {
            argument: got,
            reason,
        }) => {
            assert_eq!(got, argument, "wrong argument blamed: {reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidArgument({argument}), got {other:?}"),
    }
}

pub fn empty_and_oversized_names_are_rejected(env: &dyn TestEnv) {
    let client = env.client();
    for name in [String::new(), "x".repeat(MAX_NAME_LEN + 1)] {
        let lock = client.lock(name);
        assert_invalid(lock.lock().map(drop), "name");
        assert_invalid(lock.try_lock().map(drop), "name");
        assert_invalid(lock.try_lock_for(Duration::from_secs(1)).map(drop), "name");
        assert_invalid(lock.is_locked(), "name");
        assert_invalid(lock.is_held_by_current_thread(), "name");
        assert_invalid(lock.hold_count(), "name");
        assert_invalid(lock.remaining_lease(), "name");
        assert_invalid(lock.force_unlock(), "name");
        assert_invalid(lock.unlock(), "name");
    }
    // The longest allowed name works.
    let longest = client.lock("y".repeat(MAX_NAME_LEN - 40) + &unique("n")[..40]);
    longest
        .lock()
        .expect("longest name")
        .unlock()
        .expect("unlock");
}

pub fn zero_and_huge_durations_are_rejected(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("durations"));
    let huge = [MAX_DURATION + Duration::from_secs(1), Duration::MAX];
    assert_invalid(lock.lock_with_lease(Duration::ZERO).map(drop), "lease");
    assert_invalid(
        lock.lock_with_lease(Duration::from_micros(999)).map(drop),
        "lease",
    );
    assert_invalid(
        lock.try_lock_with_lease(Duration::from_secs(1), Duration::ZERO)
            .map(drop),
        "lease",
    );
    for d in huge {
        assert_invalid(lock.lock_with_lease(d).map(drop), "lease");
        assert_invalid(lock.try_lock_for(d).map(drop), "wait");
        assert_invalid(
            lock.try_lock_with_lease(d, Duration::from_secs(1))
                .map(drop),
            "wait",
        );
        assert_invalid(
            lock.try_lock_with_lease(Duration::ZERO, d).map(drop),
            "lease",
        );
    }
    // Nothing was taken by the rejected calls.
    assert!(!lock.is_locked().expect("is_locked"));
    // And a held lock is untouched by a rejected reentrant call.
    let guard = lock.lock().expect("lock");
    assert_invalid(lock.lock_with_lease(Duration::ZERO).map(drop), "lease");
    assert_eq!(lock.hold_count().expect("count"), 1);
    guard.unlock().expect("unlock");
}

pub fn bad_client_settings_are_rejected(env: &dyn TestEnv) {
    let build = |lease: Duration| {
        LockClientBuilder::new(env.backend())
            .watchdog_lease(lease)
            .build()
    };
    assert_invalid(build(Duration::ZERO), "watchdog_lease");
    assert_invalid(build(Duration::from_millis(5)), "watchdog_lease");
    assert_invalid(build(Duration::MAX), "watchdog_lease");
    for id in ["", "has:colon"] {
        assert_invalid(
            LockClientBuilder::new(env.backend()).client_id(id).build(),
            "client_id",
        );
    }
    let named = LockClientBuilder::new(env.backend())
        .client_id("billing-7")
        .build()
        .expect("valid id");
    assert_eq!(named.id(), "billing-7");
    // Queued plain locks are the store's fair lock: a backend without it refuses them when the
    // client is built, not at its first lock.
    let queued = LockClientBuilder::new(env.backend())
        .lock_hand_off(HandOff::Queue)
        .build();
    if env.backend().supports(LockKind::Fair) {
        let client = queued.expect("a store with the fair lock queues");
        assert_eq!(client.lock_hand_off(), HandOff::Queue);
    } else {
        assert_invalid(queued, "lock_hand_off");
    }
}
