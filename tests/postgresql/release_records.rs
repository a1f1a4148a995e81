//! What PostgreSQL adds to the replayed-release cases every server backend shares
//! (`dlock_test_support::server_cases::replayed_releases`, run by `server_suite!`): a reentrant
//! or fenced hold's release keeps no record (a row of `latches`), so a retry that finds no hold
//! answers "released" unless the hold is listed in `lost_holds` (its lease ran out, or it was
//! force-unlocked).

#![cfg(feature = "postgres")]

use std::time::Duration;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::{replayed_releases, ServerEnv};
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::LockError;

/// A reentrant lock's release keeps no record, replayed or not.
#[test]
fn a_replayed_reentrant_release_keeps_no_record() {
    let (server, _proxy, client) =
        replayed_releases::replay_a_release_whose_reply_was_lost::<PostgresServer>();
    assert_eq!(
        server.release_records(),
        0,
        "a reentrant lock's release keeps no record"
    );
    let lock = client.lock("replayed:lost-reply");
    lock.lock().expect("lock").unlock().expect("unlock");
    assert_eq!(server.release_records(), 0);
    assert_eq!(server.locks(), 0);
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
    let lock = client.lock("replayed:lost-then-retried");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    let admin = server.client();
    assert!(admin
        .lock("replayed:lost-then-retried")
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
    let lock = client.lock("replayed:taken-over");
    let guard = lock
        .lock_with_lease(Duration::from_millis(300))
        .expect("lock");
    let other = server.client();
    let taken = other
        .lock("replayed:taken-over")
        .try_lock_for(Duration::from_secs(5))
        .expect("try")
        .expect("taken once the first lease ran out");
    unlock_with_the_reply_cut_reports_the_loss(&proxy, guard);
    assert!(other
        .lock("replayed:taken-over")
        .is_held_by_current_thread()
        .expect("status"));
    taken.unlock().expect("the new holder still holds it");
}
