//! Server faults: not running, killed, restarted empty, paused. Calls fail within their
//! timeouts with clear errors; they never panic or hang (the cases shared with PostgreSQL,
//! `dlock_test_support::server_cases::faults`, and a call's bound while the pool's connections
//! break).

#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::faults;
use dlocks::redis::RedisBackend;
use dlocks::LockClientBuilder;

#[test]
fn connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout() {
    faults::connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout::<RedisServer>();
}

#[test]
fn bad_urls_and_settings_are_configuration_errors() {
    let base = "redis://127.0.0.1:6379";
    faults::bad_urls_and_settings_are_configuration_errors(
        |url| RedisBackend::connect(url).map(drop),
        &[
            "http://127.0.0.1:6379",
            "not a url",
            "redis://127.0.0.1:notaport/",
        ],
        vec![
            RedisBackend::builder(base).pool_size(0).build().map(drop),
            RedisBackend::builder(base)
                .response_timeout(Duration::ZERO)
                .build()
                .map(drop),
        ],
        "redis://user:hunter2@127.0.0.1:notaport/",
    );
}

#[test]
fn a_killed_server_makes_calls_fail_then_locks_work_again_after_a_restart() {
    faults::a_killed_server_makes_calls_fail_and_the_holder_is_told_then_locks_work_after_a_restart::<
        RedisServer,
    >();
}

#[test]
fn a_paused_server_makes_calls_fail_instead_of_hanging() {
    faults::a_paused_server_makes_calls_fail_instead_of_hanging_and_a_hold_paused_past_its_lease_is_lost::<
        RedisServer,
    >("timeout");
}

/// A server that stops answering while a lock is held: the holder is told its lease is lost at
/// its deadline, while the renewal sent to the silent server still waits for its answer (the
/// response timeout here is far longer than the lease).
#[test]
fn a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits() {
    faults::a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits::<
        RedisServer,
    >();
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
