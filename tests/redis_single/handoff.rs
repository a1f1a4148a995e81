//! Direct hand-off on Redis: a release that gives the lock to a waiter of the same client in
//! the same script, as the backend contract's `release_to` (for implementors and the engine).

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::backend::{AcquireRequest, DistributedLock, Handover, LockKind, LockRef, OwnerId};
use dlocks::redis::RedisBackend;
use dlocks::testing::{FaultyBackend, Op};
use dlocks::LockClient;
use support::redis_server::RedisServer;
use support::tcp_proxy::TcpProxy;

fn plain(name: &str) -> LockRef<'_> {
    LockRef::new(name, LockKind::Reentrant)
}

#[test]
fn a_hand_off_gives_the_lock_to_the_successor_with_its_lease_and_wakes_nobody() {
    let server = RedisServer::start();
    let backend = server.backend();
    let (first, second) = (OwnerId::from_raw("c1:1"), OwnerId::from_raw("c1:2"));
    let lock = plain("handoff:plain");
    let taken = backend
        .try_acquire(&AcquireRequest::new(lock, &first, Duration::from_secs(30)))
        .expect("acquire");
    assert!(taken.is_acquired());
    // A subscriber of the lock's channel (another process's waiter) hears nothing: the lock
    // is not free.
    let mut listener = redis::Client::open(server.url())
        .expect("client")
        .get_connection()
        .expect("connection");
    let mut pubsub = listener.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{handoff:plain}")
        .expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");

    let successor = AcquireRequest::new(lock, &second, Duration::from_secs(7));
    let handed = backend
        .release_to(lock, &first, &successor)
        .expect("release_to");
    assert!(matches!(handed, Handover::Granted(_)), "{handed:?}");
    let status = backend.status(lock, &second).expect("status");
    assert!(status.held_by_owner, "the successor holds it");
    let lease = status.remaining_lease.expect("a lease");
    assert!(
        lease <= Duration::from_secs(7) && lease > Duration::from_secs(6),
        "{lease:?}"
    );
    assert!(!backend.status(lock, &first).expect("status").held_by_owner);
    assert!(
        pubsub.get_message().is_err(),
        "no release was announced for a lock that stayed held"
    );
    // The successor's hold is an ordinary hold: it releases as any other, and the release
    // says another process (the listener) was waiting.
    assert_eq!(
        backend.release(lock, &second).expect("release"),
        dlocks::backend::Release::ReleasedToOthers
    );
}

#[test]
fn a_hand_off_by_an_owner_that_does_not_hold_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let backend = server.backend();
    let (holder, stranger, successor) = (
        OwnerId::from_raw("c1:1"),
        OwnerId::from_raw("c2:1"),
        OwnerId::from_raw("c2:2"),
    );
    let lock = plain("handoff:stranger");
    backend
        .try_acquire(&AcquireRequest::new(lock, &holder, Duration::from_secs(30)))
        .expect("acquire");
    let request = AcquireRequest::new(lock, &successor, Duration::from_secs(30));
    assert_eq!(
        backend
            .release_to(lock, &stranger, &request)
            .expect("release_to"),
        Handover::NotHeld
    );
    assert!(backend.status(lock, &holder).expect("status").held_by_owner);
}

#[test]
fn a_hand_off_whose_reply_was_lost_is_answered_by_its_record() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let backend = RedisBackend::builder(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .build()
        .expect("backend through the proxy");
    let (first, second) = (OwnerId::from_raw("c1:1"), OwnerId::from_raw("c1:2"));
    let lock = plain("handoff:lost-reply");
    backend
        .try_acquire(&AcquireRequest::new(lock, &first, Duration::from_secs(30)))
        .expect("acquire");
    // The script runs, its reply is cut, the backend sends the same request again: without
    // the record (the unlock latch key) the second attempt would find `first` gone and report
    // it not held.
    proxy.cut_reply_to("redisson_unlock_latch");
    let request = AcquireRequest::new(lock, &second, Duration::from_secs(30));
    let handed = backend
        .release_to(lock, &first, &request)
        .expect("release_to");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert!(matches!(handed, Handover::Granted(_)), "{handed:?}");
    assert!(backend.status(lock, &second).expect("status").held_by_owner);
}

#[test]
fn release_to_hands_over_only_the_reentrant_lock() {
    let server = RedisServer::start();
    let backend = server.backend();
    let (first, second) = (OwnerId::from_raw("c1:1"), OwnerId::from_raw("c1:2"));
    // (A fair lock is handed over by its own release, to a head waiter that offered.)
    assert!(backend.hands_over(LockKind::Fair));
    for kind in [LockKind::Fair, LockKind::Fenced, LockKind::Write] {
        assert_eq!(backend.hands_over(kind), kind == LockKind::Fair, "{kind}");
        let name = format!("handoff:{kind:?}");
        let lock = LockRef::new(&name, kind);
        backend
            .try_acquire(&AcquireRequest::new(lock, &first, Duration::from_secs(30)))
            .expect("acquire");
        let request = AcquireRequest::new(lock, &second, Duration::from_secs(30));
        assert_eq!(
            backend
                .release_to(lock, &first, &request)
                .expect("release_to"),
            Handover::Released,
            "{kind}"
        );
        assert!(
            !backend.status(lock, &second).expect("status").locked,
            "{kind}"
        );
    }
}

/// A fair release hands the lock to the head waiter of another client: no other client takes
/// it meanwhile, and the waiter's one acquire after the release is its claim (a message alone
/// is believed by nobody).
#[test]
fn a_fair_waiter_in_another_client_is_handed_the_lock_and_claims_it() {
    let server = RedisServer::start();
    let holder = LockClient::new(server.backend());
    let faulty = FaultyBackend::new(server.backend());
    let waiter = LockClient::new(faulty.clone());
    let held = holder.fair_lock("handoff:fair").lock().expect("lock");
    let (done, got) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let guard = waiter.fair_lock("handoff:fair").lock().expect("lock");
        let _ = done.send(());
        // Held until the test has looked.
        let _ = released.recv();
        guard.unlock().expect("unlock");
    });
    // Its first attempt queued it; the second (after subscribing) found the lock still held.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while faulty.calls(Op::TryAcquire) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    held.unlock().expect("unlock");
    // Reserved for the head: another client finds it held, before the claim or after it.
    let barger = LockClient::new(server.backend());
    assert!(
        barger
            .fair_lock("handoff:fair")
            .try_lock()
            .expect("try_lock")
            .is_none(),
        "the release handed the lock to the waiter"
    );
    got.recv().expect("the waiter got the lock");
    assert_eq!(
        faulty.calls(Op::TryAcquire),
        3,
        "one acquire after the release: the waiter's claim of what the release handed it"
    );
    drop(release);
    thread.join().expect("waiter");
}
