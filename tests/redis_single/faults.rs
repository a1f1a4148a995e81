//! Server faults: not running, killed, restarted empty, paused. Calls fail within their
//! timeouts with clear errors; they never panic or hang (the cases shared with PostgreSQL,
//! `dlock_test_support::server_cases::faults`).

#![cfg(feature = "redis")]

use std::time::Duration;

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::faults;
use dlocks::redis::RedisBackend;

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
/// the wait for a pooled connection included.
#[test]
fn a_call_to_a_silent_server_returns_within_one_response_timeout() {
    faults::a_call_to_a_silent_server_returns_within_one_answer_timeout::<RedisServer>();
}
