//! A release sent again after its reply was lost answers what the first one did (the cases
//! shared with Redis, `dlock_test_support::server_cases::latch`). On PostgreSQL a reentrant or
//! fenced hold's release keeps no latch row: a retry that finds no hold answers "released"
//! unless the hold is listed in `lost_holds` (its lease ran out, or it was force-unlocked).

#![cfg(feature = "postgres")]

use std::time::Duration;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::{latch, ServerEnv};
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::LockError;

#[test]
fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch() {
    latch::an_unlock_whose_reply_was_lost_is_replayed_by_its_latch::<PostgresServer>(
        |server, client| {
            assert_eq!(
                server.latches(),
                0,
                "a reentrant lock's release keeps no latch"
            );
            let lock = client.lock("latch:lost-reply");
            lock.lock().expect("lock").unlock().expect("unlock");
            assert_eq!(server.latches(), 0);
            assert_eq!(server.locks(), 0);
        },
    );
}

/// Unlocks `guard` with the reply of its release cut (so it is sent again), and checks that it
/// reports the hold lost.
fn unlock_with_the_reply_cut_reports_the_loss(proxy: &TcpProxy, guard: dlocks::LockGuard) {
    proxy.cut_reply_to(PostgresServer::RELEASE_REQUEST);
    let error = guard
        .unlock()
        .expect_err("the hold was lost before its release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
}

/// The hold was force-unlocked, then its release's reply was lost: the release sent again finds
/// no hold, and answers that it was lost (not that the first attempt released it).
#[test]
fn a_retried_release_of_a_hold_lost_before_it_reports_the_loss() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let lock = client.lock("latch:lost-then-retried");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    let admin = server.client();
    assert!(admin
        .lock("latch:lost-then-retried")
        .force_unlock()
        .expect("force"));
    unlock_with_the_reply_cut_reports_the_loss(&proxy, guard);
}

/// A hold whose lease ran out and was taken by another owner, released with its reply lost:
/// the retry answers the loss, and the new holder keeps the lock.
#[test]
fn a_retried_release_of_a_hold_taken_over_reports_the_loss() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let lock = client.lock("latch:taken-over");
    let guard = lock
        .lock_with_lease(Duration::from_millis(300))
        .expect("lock");
    let other = server.client();
    let taken = other
        .lock("latch:taken-over")
        .try_lock_for(Duration::from_secs(5))
        .expect("try")
        .expect("taken once the first lease ran out");
    unlock_with_the_reply_cut_reports_the_loss(&proxy, guard);
    assert!(other
        .lock("latch:taken-over")
        .is_held_by_current_thread()
        .expect("status"));
    taken.unlock().expect("the new holder still holds it");
}

#[test]
/// A reentrant release that finds no live hold latches its "not held" under its request id (ten
/// minutes), so that one sent again answers the same: else a retry finding nothing would take
/// the hold for released by its first attempt.
fn a_release_that_found_nothing_latches_its_answer() {
    latch::a_release_that_found_nothing_reports_the_loss::<PostgresServer>(1);
}

#[test]
fn two_hundred_pairs_on_distinct_names_leave_no_garbage() {
    latch::two_hundred_pairs_on_distinct_names_leave_no_garbage::<PostgresServer>();
}

#[test]
fn a_set_once_step_whose_reply_was_lost_answers_as_it_first_did() {
    latch::a_set_once_step_whose_reply_was_lost_answers_as_it_first_did::<PostgresServer>();
}

/// The retry finds the hold in `lost_holds`: the force unlock noted the hold it ended, though
/// its lease had run out.
#[test]
fn a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss() {
    latch::a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss::<PostgresServer>(
    );
}
