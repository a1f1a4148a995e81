//! The `DistributedLock` contract itself, called directly, as a backend author would test it.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlock::{Acquire, HoldRef, OwnerId, Release};

use super::unique;
use crate::support::env::TestEnv;

fn owner() -> OwnerId {
    OwnerId::from_raw(format!("{}:7", uuid::Uuid::new_v4()))
}

pub fn backend_acquire_reports_holders_lease(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a, b) = (unique("contract-acquire"), owner(), owner());
    let lease = env.unit() * 50;
    assert_eq!(
        backend.try_acquire(&name, &a, lease).expect("a"),
        Acquire::Acquired
    );
    assert_eq!(
        backend.try_acquire(&name, &a, lease).expect("a again"),
        Acquire::Acquired
    );
    match backend.try_acquire(&name, &b, lease).expect("b") {
        Acquire::Held {
            remaining_lease: Some(left),
        } => {
            assert!(left <= lease && left > lease / 2, "{left:?}")
        }
        other => panic!("expected Held with a lease, got {other:?}"),
    }
    let status = backend.status(&name, &a).expect("status");
    assert!(status.locked && status.held_by_owner);
    assert!(!backend.status(&name, &b).expect("status").held_by_owner);
    // One release ends the owner's hold whatever its count on the store.
    assert_eq!(
        backend.release(&name, &a).expect("release"),
        Release::Released
    );
    assert!(!backend.status(&name, &a).expect("status").locked);
}

pub fn backend_release_by_a_stranger_changes_nothing(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a, b) = (unique("contract-release"), owner(), owner());
    let lease = env.unit() * 50;
    backend.try_acquire(&name, &a, lease).expect("a");
    assert_eq!(
        backend.release(&name, &b).expect("stranger"),
        Release::NotHeld
    );
    assert!(backend.status(&name, &a).expect("status").held_by_owner);
    assert!(!backend
        .force_unlock(&unique("never-held"))
        .expect("force nothing"));
    assert!(backend.force_unlock(&name).expect("force"));
    assert_eq!(
        backend.release(&name, &a).expect("after force"),
        Release::NotHeld
    );
}

pub fn backend_renew_reports_gone_holds(env: &dyn TestEnv) {
    let backend = env.backend();
    let (held, gone, a) = (unique("contract-held"), unique("contract-gone"), owner());
    let short = env.unit() * 4;
    backend.try_acquire(&held, &a, short).expect("acquire");
    let result = backend
        .renew(
            &[
                HoldRef {
                    name: &held,
                    owner: &a,
                },
                HoldRef {
                    name: &gone,
                    owner: &a,
                },
            ],
            env.unit() * 100,
        )
        .expect("renew");
    assert_eq!(result, vec![true, false]);
    env.advance(short * 2);
    assert!(
        backend.status(&held, &a).expect("status").held_by_owner,
        "renewed past the short lease"
    );
    assert!(
        !backend.status(&gone, &a).expect("status").locked,
        "nothing resurrected"
    );
    backend.release(&held, &a).expect("release");
}

pub fn backend_subscription_is_notified_on_release(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a) = (unique("contract-subscribe"), owner());
    backend
        .try_acquire(&name, &a, env.unit() * 100)
        .expect("acquire");
    let subscription = backend.subscribe(&name).expect("subscribe");
    let signal = Arc::clone(subscription.signal());
    let seen = signal.generation();
    let releaser = {
        let backend = backend.clone();
        let name = name.clone();
        thread::spawn(move || backend.release(&name, &a).expect("release"))
    };
    assert_eq!(releaser.join().expect("releaser"), Release::Released);
    // The notification may travel through a server: wait for it, boundedly, in real time.
    let wake = signal.wait_until(
        seen,
        Some(std::time::Instant::now() + Duration::from_secs(5)),
    );
    assert_eq!(wake, dlock::Wake::Signaled);
    drop(subscription);
}
