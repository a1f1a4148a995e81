//! The `DistributedLock` contract itself, called directly, as a backend author would test it.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlocks::backend::MAX_DURATION;
use dlocks::backend::{
    Acquire, AcquireRequest, DistributedLock, HoldRef, LockRef, LossReason, OwnerId, Release,
    Renewal,
};
use dlocks::LockKind;

use super::unique;
use crate::env::TestEnv;

fn owner() -> OwnerId {
    super::new_owner()
}

fn lock(name: &str) -> LockRef<'_> {
    LockRef::reentrant(name)
}

fn acquire(backend: &dyn DistributedLock, name: &str, owner: &OwnerId, lease: Duration) -> Acquire {
    backend
        .try_acquire(&AcquireRequest::new(lock(name), owner, lease))
        .expect("try_acquire")
}

pub fn backend_acquire_reports_holders_lease(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a, b) = (unique("contract-acquire"), owner(), owner());
    let lease = env.unit() * 50;
    assert!(acquire(&*backend, &name, &a, lease).is_acquired());
    assert!(
        acquire(&*backend, &name, &a, lease).is_acquired(),
        "the owner again"
    );
    match acquire(&*backend, &name, &b, lease) {
        Acquire::Held {
            remaining_lease: Some(left),
        } => {
            assert!(left <= lease && left > lease / 2, "{left:?}")
        }
        other => panic!("expected Held with a lease, got {other:?}"),
    }
    let status = backend.status(lock(&name), &a).expect("status");
    assert!(status.locked && status.held_by_owner);
    assert!(
        !backend
            .status(lock(&name), &b)
            .expect("status")
            .held_by_owner
    );
    // One release ends the owner's hold whatever its count on the store.
    assert_eq!(
        backend.release(lock(&name), &a).expect("release"),
        Release::Released
    );
    assert!(!backend.status(lock(&name), &a).expect("status").locked);
}

pub fn backend_release_by_a_stranger_changes_nothing(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a, b) = (unique("contract-release"), owner(), owner());
    let lease = env.unit() * 50;
    acquire(&*backend, &name, &a, lease);
    assert_eq!(
        backend.release(lock(&name), &b).expect("stranger"),
        Release::NotHeld
    );
    assert!(
        backend
            .status(lock(&name), &a)
            .expect("status")
            .held_by_owner
    );
    assert!(!backend
        .force_unlock(lock(&unique("never-held")))
        .expect("force nothing"));
    assert!(backend.force_unlock(lock(&name)).expect("force"));
    assert_eq!(
        backend.release(lock(&name), &a).expect("after force"),
        Release::NotHeld
    );
}

pub fn backend_renew_reports_gone_holds(env: &dyn TestEnv) {
    let backend = env.backend();
    let (held, gone, taken, a, b) = (
        unique("contract-held"),
        unique("contract-gone"),
        unique("contract-taken"),
        owner(),
        owner(),
    );
    let short = env.unit() * 4;
    acquire(&*backend, &held, &a, short);
    acquire(&*backend, &taken, &b, env.unit() * 100);
    let result = backend
        .renew(
            &[
                HoldRef {
                    lock: lock(&held),
                    owner: &a,
                },
                HoldRef {
                    lock: lock(&gone),
                    owner: &a,
                },
                HoldRef {
                    lock: lock(&taken),
                    owner: &a,
                },
            ],
            env.unit() * 100,
        )
        .expect("renew");
    assert_eq!(result[0], Renewal::Renewed);
    assert!(matches!(result[1], Renewal::Lost(_)), "{:?}", result[1]);
    assert_eq!(result[2], Renewal::Lost(LossReason::TakenOver));
    env.advance(short * 2);
    assert!(
        backend
            .status(lock(&held), &a)
            .expect("status")
            .held_by_owner,
        "renewed past the short lease"
    );
    assert!(
        !backend.status(lock(&gone), &a).expect("status").locked,
        "nothing resurrected"
    );
    assert!(
        backend
            .status(lock(&taken), &b)
            .expect("status")
            .held_by_owner,
        "another owner's lock is left alone"
    );
    backend.release(lock(&held), &a).expect("release");
    backend.release(lock(&taken), &b).expect("release");
}

pub fn backend_subscription_is_notified_on_release(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, a) = (unique("contract-subscribe"), owner());
    acquire(&*backend, &name, &a, env.unit() * 100);
    let subscription = backend.subscribe(lock(&name), &a).expect("subscribe");
    let signal = Arc::clone(subscription.signal());
    let seen = signal.generation();
    let releaser = {
        let backend = backend.clone();
        let name = name.clone();
        thread::spawn(move || {
            backend
                .release(LockRef::reentrant(&name), &a)
                .expect("release")
        })
    };
    assert_eq!(releaser.join().expect("releaser"), Release::Released);
    // The notification may travel through a server: wait for it, boundedly, in real time.
    let wake = signal.wait_until(
        seen,
        Some(std::time::Instant::now() + Duration::from_secs(5)),
    );
    assert_eq!(wake, dlocks::backend::Wake::Signaled);
    drop(subscription);
}

/// A renewal of some two thousand holds of one client (reentrant holds, and several read holds
/// of each of many names where the backend keeps read-write locks) answers every hold in its
/// place: renewed, gone, or taken over by another owner; and the renewed ones have the new
/// lease.
pub fn backend_renewal_of_thousands_of_holds_answers_each_in_its_place(env: &dyn TestEnv) {
    let backend = env.backend();
    // Long enough that no hold runs out while the two thousand are taken, one by one, on a
    // loaded machine (over a minute on a three-member etcd cluster).
    let lease = (env.unit() * 100).max(Duration::from_secs(600));
    let exclusive: Vec<(String, OwnerId)> = (0..900)
        .map(|i| (unique(&format!("contract-many-{i}")), owner()))
        .collect();
    for chunk in exclusive.chunks(100) {
        let requests: Vec<AcquireRequest<'_>> = chunk
            .iter()
            .map(|(name, owner)| AcquireRequest::new(lock(name), owner, lease))
            .collect();
        let taken = backend
            .try_acquire_many(&requests)
            .expect("try_acquire_many");
        assert!(taken.iter().all(Acquire::is_acquired), "{taken:?}");
    }
    let shared: Vec<String> = if backend.supports(LockKind::Read) {
        (0..400)
            .map(|i| unique(&format!("contract-many-read-{i}")))
            .collect()
    } else {
        Vec::new()
    };
    let readers: Vec<(&str, OwnerId)> = shared
        .iter()
        .flat_map(|name| (0..3).map(move |_| (name.as_str(), owner())))
        .collect();
    for (name, reader) in &readers {
        let request = AcquireRequest::new(LockRef::new(name, LockKind::Read), reader, lease);
        assert!(backend.try_acquire(&request).expect("read").is_acquired());
    }
    // Every tenth exclusive hold released, every tenth from the fifth taken over; the first
    // reader of every fourth name released.
    let stranger = owner();
    let mut expected = Vec::new();
    for (i, (name, holder)) in exclusive.iter().enumerate() {
        expected.push(match i % 10 {
            0 => {
                assert_eq!(
                    backend.release(lock(name), holder).expect("release"),
                    Release::Released
                );
                Some(false)
            }
            5 => {
                backend.release(lock(name), holder).expect("release");
                assert!(acquire(&*backend, name, &stranger, lease).is_acquired());
                None
            }
            _ => Some(true),
        });
    }
    for (i, (name, reader)) in readers.iter().enumerate() {
        let gone = i % 12 == 0;
        if gone {
            let read = LockRef::new(name, LockKind::Read);
            assert_eq!(
                backend.release(read, reader).expect("release"),
                Release::Released
            );
        }
        expected.push(Some(!gone));
    }
    // One batch, the kinds interleaved.
    let holds = exclusive
        .iter()
        .map(|(name, owner)| HoldRef {
            lock: lock(name),
            owner,
        })
        .chain(readers.iter().map(|(name, owner)| HoldRef {
            lock: LockRef::new(name, LockKind::Read),
            owner,
        }));
    let (first, rest): (Vec<_>, Vec<_>) = holds
        .zip(expected)
        .enumerate()
        .partition(|(i, _)| *i < exclusive.len());
    let mut rest = rest.into_iter().map(|(_, hold)| hold);
    let mut mixed: Vec<(HoldRef<'_>, Option<bool>)> = Vec::new();
    for (_, hold) in first {
        mixed.push(hold);
        mixed.extend(rest.next());
    }
    mixed.extend(rest);
    let refs: Vec<HoldRef<'_>> = mixed.iter().map(|(hold, _)| *hold).collect();
    let renewals = backend.renew(&refs, lease * 3).expect("renew");
    assert_eq!(renewals.len(), refs.len());
    for ((hold, expected), renewal) in mixed.iter().zip(&renewals) {
        match expected {
            Some(true) => assert_eq!(*renewal, Renewal::Renewed, "{hold:?}"),
            Some(false) => assert!(matches!(renewal, Renewal::Lost(_)), "{hold:?}: {renewal:?}"),
            None => assert_eq!(*renewal, Renewal::Lost(LossReason::TakenOver), "{hold:?}"),
        }
    }
    let kept = exclusive.iter().enumerate().filter(|(i, _)| i % 5 != 0);
    for (_, (name, holder)) in kept.step_by(97) {
        let left = backend
            .status(lock(name), holder)
            .expect("status")
            .remaining_lease
            .expect("a lease");
        assert!(left > lease * 2, "renewed to three leases, {left:?} left");
    }
    for (hold, _) in &mixed {
        backend.release(hold.lock, hold.owner).expect("release");
    }
    for (i, (name, _)) in exclusive.iter().enumerate() {
        if i % 10 == 5 {
            backend.release(lock(name), &stranger).expect("release");
        }
    }
}

/// A plain waiter's tries with the longest queue slot the client takes ([`MAX_DURATION`], as
/// checked settings and leases go) are answered, refused while the lock is held, and the lock
/// is the waiter's once free: no deadline or mark's life overflows.
pub fn backend_waiter_with_the_longest_slot_is_answered(env: &dyn TestEnv) {
    let backend = env.backend();
    let (name, holder, waiter) = (unique("contract-long-slot"), owner(), owner());
    acquire(&*backend, &name, &holder, env.unit() * 100);
    let request = AcquireRequest::new(lock(&name), &waiter, env.unit() * 100)
        .queued_as(&waiter)
        .waiting(true, MAX_DURATION);
    for _ in 0..2 {
        let refused = backend.try_acquire(&request).expect("a refused try");
        assert!(!refused.is_acquired(), "the lock is held");
    }
    assert!(backend
        .release(lock(&name), &holder)
        .expect("release")
        .is_released());
    let taken = backend.try_acquire(&request).expect("the waiter's try");
    assert!(taken.is_acquired(), "free, and the waiter's turn");
    backend.release(lock(&name), &waiter).expect("release");
}
