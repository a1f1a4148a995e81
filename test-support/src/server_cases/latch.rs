//! Releases are latched by request id: a release sent again after its reply was lost replays
//! the first answer instead of acting twice; a release that found nothing leaves no latch; and
//! latches do not pile up.

use std::time::Duration;

use dlocks::{LockClient, LockError};

use super::ServerEnv;
use crate::tcp_proxy::TcpProxy;

/// The release runs on the server, and the connection is cut before its reply comes back. The
/// backend sends it again on a new connection: without the latch it would find the lock
/// already gone and report the lease lost (or, had another owner taken it meanwhile, leave
/// that owner's hold alone all the same: the retry only replays). What becomes of the latch
/// then is the backend's own (`then`, given the server and the client through the proxy).
pub fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch<E: ServerEnv>(
    then: impl FnOnce(&E, &LockClient),
) {
    let server = E::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let lock = client.lock("latch:lost-reply");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");

    proxy.cut_reply_to(E::RELEASE_REQUEST);
    guard
        .unlock()
        .expect("the retried unlock replays the first answer");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert!(!lock.is_locked().expect("status"), "released once");
    then(&server, &client);
}

/// A release that found the lock gone (force-unlocked) is an error, and latches nothing.
pub fn a_release_that_found_nothing_is_not_latched<E: ServerEnv>() {
    let server = E::start();
    let client = server.client();
    let lock = client.lock("latch:nothing");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    assert!(lock.force_unlock().expect("force"));
    let error = guard.unlock().expect_err("nothing to release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    assert_eq!(server.latches(), 0);
}

/// Each latch goes with its connection's next release (or command): after two hundred lock
/// and unlock pairs on distinct names, no lock is left and at most the last latch of each of
/// the two pooled connections.
pub fn two_hundred_pairs_on_distinct_names_leave_no_garbage<E: ServerEnv>() {
    let server = E::start();
    let client = server.client_with_pool(2);
    for i in 0..200 {
        client
            .lock(format!("garbage:{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
    }
    assert_eq!(server.locks(), 0, "no lock is left after the last unlock");
    let latches = server.latches();
    assert!(
        latches <= 2,
        "at most one latch per pooled connection is left, found {latches}"
    );
}
