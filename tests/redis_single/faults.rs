//! Server faults: not running, killed, restarted empty, paused. Calls fail within their
//! timeouts with clear errors; they never panic or hang.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LockClientBuilder, LockError};
use support::redis_server::{free_port, RedisServer};

#[test]
fn connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let started = Instant::now();
    let error = RedisBackend::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .expect_err("nothing listens");
    assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
    assert!(
        error.to_string().contains("127.0.0.1"),
        "names the server: {error}"
    );
    // Generous: the point is that it does not hang.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn bad_urls_and_settings_are_configuration_errors() {
    for url in [
        "http://127.0.0.1:6379",
        "not a url",
        "redis://127.0.0.1:notaport/",
    ] {
        let error = RedisBackend::connect(url).expect_err(url);
        assert!(
            matches!(error, LockError::Config { .. }),
            "{url}: {error:?}"
        );
    }
    let error = RedisBackend::builder("redis://127.0.0.1:6379")
        .pool_size(0)
        .build()
        .expect_err("pool");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    let error = RedisBackend::builder("redis://127.0.0.1:6379")
        .response_timeout(Duration::ZERO)
        .build()
        .expect_err("timeout");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    let error = RedisBackend::connect("redis://user:hunter2@127.0.0.1:notaport/").expect_err("bad");
    assert!(
        !error.to_string().contains("hunter2"),
        "passwords are not shown: {error}"
    );
}

#[test]
fn a_killed_server_makes_calls_fail_then_locks_work_again_after_a_restart() {
    let mut server = RedisServer::start();
    let unit = Duration::from_millis(100);
    let lease = unit * 6;
    let client = LockClientBuilder::new(std::sync::Arc::new(server.backend()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
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

    // The watchdog cannot renew: the guard is lost once its lease deadline has passed.
    std::thread::sleep(lease + unit * 3);
    assert!(
        guard.is_lost(),
        "the lease ran out while the server was unreachable"
    );

    server.restart();
    let other = client.lock("faults:after");
    let fresh = other.lock().expect("new locks work after the restart");
    fresh.unlock().expect("unlock");
    let error = guard.unlock().expect_err("the old hold is gone");
    assert!(error.is_not_held(), "{error:?}");
}

#[test]
fn a_paused_server_makes_calls_fail_instead_of_hanging() {
    let server = RedisServer::start();
    let backend = server
        .backend_builder()
        .response_timeout(Duration::from_millis(300))
        .checkout_timeout(Duration::from_millis(500))
        .build()
        .expect("backend");
    let client = LockClientBuilder::new(std::sync::Arc::new(backend))
        .build()
        .expect("client");
    let lock = client.lock("faults:paused");
    lock.lock().expect("lock").unlock().expect("unlock");

    server.pause();
    let started = Instant::now();
    let acquire = lock.try_lock().map(|guard| guard.is_some());
    let status = lock.is_locked();
    let elapsed = started.elapsed();
    server.resume();

    let error = acquire.expect_err("no answer from a paused server");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        error.to_string().contains("timeout"),
        "says it timed out: {error}"
    );
    assert!(status.expect_err("no answer").is_unavailable());
    assert!(
        elapsed < Duration::from_secs(10),
        "bounded by the timeouts, took {elapsed:?}"
    );

    // Once the server answers again, so does the lock.
    let mut ok = false;
    for _ in 0..3 {
        if let Ok(Some(guard)) = lock.try_lock() {
            guard.unlock().expect("unlock");
            ok = true;
            break;
        }
    }
    assert!(ok, "locks work again after the server resumed");
}

/// A server that stops answering while a lock is held: the holder is told its lease is lost at
/// its deadline, while the renewal sent to the silent server still waits for its answer (the
/// response timeout here is far longer than the lease).
#[test]
fn a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits() {
    let server = RedisServer::start();
    let backend = server
        .backend_builder()
        .response_timeout(Duration::from_secs(30))
        .build()
        .expect("backend");
    let client = LockClientBuilder::new(std::sync::Arc::new(backend))
        .watchdog_lease(Duration::from_millis(1200))
        .build()
        .expect("client");
    let events = client.lease_events();
    let guard = client.lock("faults:silent").lock().expect("lock");
    server.pause();
    let lost = loop {
        let event = events
            .recv_timeout(Duration::from_secs(15))
            .expect("told before the 30 s renewal answers");
        if matches!(event.change, dlocks::LeaseChange::Lost { .. }) {
            break event;
        }
    };
    server.resume();
    assert!(guard.is_lost());
    assert!(
        lost.at >= guard.lease_deadline(),
        "told when its deadline passed, not before"
    );
    assert!(matches!(
        lost.change,
        dlocks::LeaseChange::Lost {
            reason: dlocks::LossReason::Unreachable
        }
    ));
}

/// A call to a server that stopped answering returns within its wait and one response timeout,
/// the wait for a pooled connection included: `try_lock()` within the response timeout, not the
/// checkout timeout (5 s by default), even once the pool's connections have broken.
#[test]
fn a_call_to_a_silent_server_returns_within_one_response_timeout() {
    let server = RedisServer::start();
    let backend = server
        .backend_builder()
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("backend");
    let client = LockClientBuilder::new(std::sync::Arc::new(backend))
        .build()
        .expect("client");
    let lock = client.lock("faults:bounded");
    lock.lock().expect("lock").unlock().expect("unlock");
    server.pause();
    // The first call breaks the pooled connection; the next ones find none.
    for call in 0..3 {
        let started = Instant::now();
        let single = lock.try_lock().map(|guard| guard.is_some());
        let single_took = started.elapsed();
        let started = Instant::now();
        let waiting = lock
            .try_lock_for(Duration::from_millis(100))
            .map(|guard| guard.is_some());
        let waiting_took = started.elapsed();
        assert!(single.expect_err("silent").is_unavailable(), "call {call}");
        assert!(waiting.expect_err("silent").is_unavailable(), "call {call}");
        // 300 ms each, far from the 5 s checkout timeout; the margin is for a loaded machine.
        assert!(
            single_took < Duration::from_secs(2),
            "call {call}: try_lock() took {single_took:?}"
        );
        assert!(
            waiting_took < Duration::from_secs(2),
            "call {call}: try_lock_for(100 ms) took {waiting_took:?}"
        );
    }
    server.resume();
}
