//! Server faults on PostgreSQL: not running, killed, restarted, paused past a lease, sessions
//! ended with `pg_terminate_backend`. Calls fail within their timeouts with clear errors, holders
//! are told when their lease is lost, and everything works again once the server is back.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::postgres::PostgresBackend;
use dlocks::{LeaseChange, LockClientBuilder, LockError, LossReason};
use support::postgres_server::{free_port, PostgresServer};

/// Waits (bounded) for the first `Lost` event of lock `name`.
fn next_loss(
    events: &dlocks::crossbeam_channel::Receiver<dlocks::LeaseEvent>,
    name: &str,
) -> LossReason {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = events.recv_timeout(left).expect("a lease event");
        if &*event.name == name {
            if let LeaseChange::Lost { reason } = event.change {
                return reason;
            }
        }
    }
}

#[test]
fn connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let started = Instant::now();
    let error = PostgresBackend::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect_err("nothing listens");
    assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
    assert!(
        error.to_string().contains("127.0.0.1"),
        "names the server: {error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn bad_urls_and_settings_are_configuration_errors() {
    for url in [
        "http://127.0.0.1:5432/db",
        "postgres://127.0.0.1:notaport/db",
        "postgres:///db",
    ] {
        let error = PostgresBackend::connect(url).expect_err(url);
        assert!(
            matches!(error, LockError::Config { .. }),
            "{url}: {error:?}"
        );
    }
    let base = "postgres://postgres@127.0.0.1:5432/postgres";
    let errors = [
        PostgresBackend::builder(base).pool_size(0).build(),
        PostgresBackend::builder(base)
            .statement_timeout(Duration::ZERO)
            .build(),
        PostgresBackend::builder(base).schema("two words").build(),
        PostgresBackend::builder(base).schema("").build(),
    ];
    for result in errors {
        let error = result.expect_err("refused");
        assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    }
    let error =
        PostgresBackend::connect("postgres://user:hunter2@127.0.0.1:notaport/db").expect_err("bad");
    assert!(
        !error.to_string().contains("hunter2"),
        "passwords are not shown: {error}"
    );
}

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
fn a_killed_server_makes_calls_fail_and_the_holder_is_told_then_locks_work_after_a_restart() {
    let mut server = PostgresServer::start();
    let unit = Duration::from_millis(100);
    let lease = unit * 6;
    let client = LockClientBuilder::new(Arc::new(server.backend()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let lock = client.lock("faults:killed");
    let guard = lock.lock().expect("lock");

    server.kill();
    let started = Instant::now();
    let error = lock.is_locked().expect_err("the server is gone");
    assert!(error.is_unavailable(), "{error:?}");
    let error = client
        .lock("faults:other")
        .try_lock()
        .expect_err("the server is gone");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "errors come within the timeouts"
    );

    // The watchdog cannot renew: the holder is told once its lease deadline has passed.
    assert_eq!(next_loss(&events, "faults:killed"), LossReason::Unreachable);
    assert!(guard.is_lost());

    server.restart();
    let fresh = client
        .lock("faults:after")
        .lock()
        .expect("locks work again");
    fresh.unlock().expect("unlock");
    let error = guard.unlock().expect_err("the old hold is lost");
    assert!(error.is_not_held(), "{error:?}");
}

#[test]
fn a_paused_server_makes_calls_fail_instead_of_hanging_and_a_hold_paused_past_its_lease_is_lost() {
    let server = PostgresServer::start();
    let backend = server
        .backend_builder()
        .statement_timeout(Duration::from_millis(300))
        .checkout_timeout(Duration::from_millis(500))
        .build()
        .expect("backend");
    let lease = Duration::from_millis(900);
    let client = LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let held = client.lock("faults:paused-holder");
    let guard = held.lock().expect("lock");
    let lock = client.lock("faults:paused");

    server.pause();
    let started = Instant::now();
    let acquire = lock.try_lock().map(|guard| guard.is_some());
    let status = lock.is_locked();
    let elapsed = started.elapsed();
    // Past the holder's lease: its renewals cannot reach the server.
    let loss = next_loss(&events, "faults:paused-holder");
    server.resume();

    let error = acquire.expect_err("no answer from a paused server");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        error.to_string().contains("no answer within"),
        "says it timed out: {error}"
    );
    assert!(status.expect_err("no answer").is_unavailable());
    assert!(
        elapsed < Duration::from_secs(10),
        "bounded by the timeouts, took {elapsed:?}"
    );
    assert_eq!(loss, LossReason::Unreachable);
    assert!(guard.is_lost());

    // Once the server answers again, so does the lock; the lapsed hold is free for others.
    let other = LockClientBuilder::new(Arc::new(server.backend()))
        .build()
        .expect("another client");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match other.lock("faults:paused-holder").try_lock() {
            Ok(Some(taken)) => {
                taken.unlock().expect("unlock");
                break;
            }
            Ok(None) | Err(_) => {
                assert!(Instant::now() < deadline, "the lapsed lock never came free");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let again = lock.try_lock().expect("works again").expect("free");
    again.unlock().expect("unlock");
}

/// A server that stops answering while a lock is held: the holder is told its lease is lost at
/// its deadline, while the renewal sent to the silent server still waits for its answer (the
/// statement timeout here is far longer than the lease).
#[test]
fn a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits() {
    let server = PostgresServer::start();
    let backend = server
        .backend_builder()
        .statement_timeout(Duration::from_secs(30))
        .build()
        .expect("backend");
    let client = LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(Duration::from_millis(1200))
        .build()
        .expect("client");
    let events = client.lease_events();
    let guard = client.lock("faults:silent").lock().expect("lock");
    server.pause();
    let started = Instant::now();
    let loss = next_loss(&events, "faults:silent");
    let told_after = started.elapsed();
    server.resume();
    assert_eq!(loss, LossReason::Unreachable);
    assert!(guard.is_lost());
    // Told at its deadline (1.2 s at most from the pause), not when the 30 s statement timeout
    // gives the renewal up; the margin is for a loaded machine.
    assert!(
        told_after < Duration::from_secs(15),
        "told {told_after:?} after the pause"
    );
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
    let server = PostgresServer::start();
    let holder = LockClientBuilder::new(Arc::new(server.backend()))
        .build()
        .expect("holder");
    let waiter_backend = server.backend();
    let waiter = LockClientBuilder::new(Arc::new(waiter_backend.clone()))
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
