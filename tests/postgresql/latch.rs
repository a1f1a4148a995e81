//! Releases on PostgreSQL are latched by request id: a release sent again after its reply was
//! lost replays the first answer instead of acting twice, and the latch goes once the answer is
//! in hand.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::postgres::PostgresBackend;
use dlocks::{LockClient, LockError};
use support::postgres_server::PostgresServer;
use support::tcp_proxy::TcpProxy;

fn latches(server: &PostgresServer) -> i64 {
    server
        .admin()
        .query_one("SELECT count(*) FROM dlock.latches", &[])
        .expect("count latches")
        .get(0)
}

#[test]
fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch() {
    let server = PostgresServer::start();
    server.backend(); // the schema
    let proxy = TcpProxy::start(server.port());
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    // Unprepared statements carry their SQL, which the proxy recognizes.
    let backend = PostgresBackend::builder(&url)
        .prepared_statements(false)
        .pool_size(1)
        .statement_timeout(Duration::from_secs(2))
        .build()
        .expect("backend through the proxy");
    let client = LockClient::new(backend);
    let lock = client.lock("latch:lost-reply");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");

    // The release runs on the server, and the connection is cut before its reply comes back.
    // The backend sends it again on a new connection: without the latch it would find the lock
    // already gone and report the lease lost (or, had another owner taken it meanwhile, leave
    // that owner's hold alone all the same: the retry only replays).
    proxy.cut_reply_to(".release(");
    guard
        .unlock()
        .expect("the retried unlock replays the first answer");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert!(!lock.is_locked().expect("status"), "released once");
    assert_eq!(
        latches(&server),
        1,
        "the answered retry's latch is kept until the next release"
    );

    // The next release on that connection deletes it.
    lock.lock().expect("lock").unlock().expect("unlock");
    assert_eq!(latches(&server), 1, "only the last release's latch is left");
}

#[test]
fn a_release_that_found_nothing_is_not_latched() {
    let server = PostgresServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.lock("latch:nothing");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    assert!(lock.force_unlock().expect("force"));
    let error = guard.unlock().expect_err("nothing to release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    assert_eq!(latches(&server), 0);
}

#[test]
fn two_hundred_pairs_on_distinct_names_leave_no_garbage() {
    let server = PostgresServer::start();
    let client = LockClient::new(
        server
            .backend_builder()
            .pool_size(2)
            .build()
            .expect("backend"),
    );
    for i in 0..200 {
        client
            .lock(format!("garbage:{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
    }
    let mut admin = server.admin();
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM dlock.locks", &[])
        .expect("count")
        .get(0);
    assert_eq!(rows, 0, "no lock row is left");
    assert!(
        latches(&server) <= 2,
        "at most one latch per pooled connection is left"
    );
}
