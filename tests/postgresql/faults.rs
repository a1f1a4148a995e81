//! What PostgreSQL's sessions and durable rows add to the fault cases every server backend
//! shares (`dlock_test_support::server_cases::faults`, run by `server_suite!`): an unknown
//! database, sessions ended with `pg_terminate_backend`, a hold surviving a restart.

#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_test_support::postgres_server::PostgresServer;
use dlocks::postgres::PostgresBackend;
use dlocks::{HandOff, LockClientBuilder, LockError};

#[test]
fn an_unknown_database_is_a_configuration_error() {
    let server = PostgresServer::start();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/no_such_database",
        server.port()
    );
    let error = PostgresBackend::connect(&url).expect_err("no database");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
}

#[test]
fn ended_pooled_sessions_cost_no_failed_call() {
    let server = PostgresServer::start();
    let lease = Duration::from_millis(900);
    let client = LockClientBuilder::new(Arc::new(server.backend()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let lock = client.lock("faults:terminated");
    let guard = lock.lock().expect("lock");
    assert!(server.terminate("dlock") >= 1, "pooled sessions were there");

    // Each call finds its connection closed, and runs again on a new one.
    assert!(lock.is_held_by_current_thread().expect("status"));
    let other = client.lock("faults:terminated-2");
    other
        .try_lock()
        .expect("acquire")
        .expect("free")
        .unlock()
        .expect("unlock");
    server.terminate("dlock");
    // Two leases pass: only renewals sent on new connections keep the hold.
    std::thread::sleep(lease * 2);
    assert!(
        !guard.is_lost(),
        "the watchdog renewed through the ended sessions"
    );
    server.terminate("dlock");
    guard
        .unlock()
        .expect("unlock after the sessions were ended");
    assert!(!lock.is_locked().expect("status"));
    assert!(events.try_recv().is_err(), "nothing was lost");
}

#[test]
fn a_waiter_is_still_woken_after_its_listening_session_was_ended() {
    woken_after_the_listening_session_was_ended(HandOff::Race);
}

/// A queued waiter (the fair lock's) is told on its client's channel: the listener listens to
/// that again too.
#[test]
fn a_queued_waiter_is_still_woken_after_its_listening_session_was_ended() {
    woken_after_the_listening_session_was_ended(HandOff::Queue);
}

/// One client holds a plain lock for 60 s, another waits for it (both with `hand_off`); the
/// waiter's listening session is ended, comes back, and the release still wakes the waiter.
fn woken_after_the_listening_session_was_ended(hand_off: HandOff) {
    let server = PostgresServer::start();
    let holder = LockClientBuilder::new(Arc::new(server.backend()))
        .lock_hand_off(hand_off)
        .build()
        .expect("holder");
    let waiter_backend = server.backend();
    let waiter = LockClientBuilder::new(Arc::new(waiter_backend.clone()))
        .lock_hand_off(hand_off)
        .build()
        .expect("waiter");
    let name = "faults:listener";
    let held = holder
        .lock(name)
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let started = Instant::now();
            let guard = waiter
                .lock(name)
                .try_lock_for(Duration::from_secs(30))
                .expect("wait")
                .expect("woken by the release");
            guard.unlock().expect("unlock");
            started.elapsed()
        });
        server.await_listeners(1);
        assert_eq!(server.terminate("dlock-listener"), 1);
        // The listener reconnects and listens again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(waiter_backend.is_listening() && server.sessions("dlock-listener") == 1) {
            assert!(Instant::now() < deadline, "the listener did not come back");
            std::thread::sleep(Duration::from_millis(20));
        }
        held.unlock().expect("release");
        let waited = waiting.join().expect("waiter");
        assert!(
            waited < Duration::from_secs(20),
            "woken by the release, not by the 60 s lease: {waited:?}"
        );
    });
}

#[test]
fn a_hold_survives_a_server_restart_shorter_than_its_lease() {
    let mut server = PostgresServer::start();
    let client = LockClientBuilder::new(Arc::new(server.backend()))
        .build()
        .expect("client");
    let lock = client.lock("faults:restart");
    let guard = lock.lock().expect("lock"); // durable on the default synchronous_commit = on

    server.kill(); // a crash: recovery replays the WAL at the next start
    server.restart();

    let other = LockClientBuilder::new(Arc::new(server.backend()))
        .build()
        .expect("another process");
    assert!(
        other
            .lock("faults:restart")
            .try_lock()
            .expect("try")
            .is_none(),
        "the hold came back with the server"
    );
    assert!(!guard.is_lost());
    guard.unlock().expect("the holder still releases it");
    assert!(!other.lock("faults:restart").is_locked().expect("status"));
}
