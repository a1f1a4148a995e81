//! Steps their caller gave up on while they waited on the server: for a row another session
//! held (a slow step of another client, or an operator's open transaction on the locks
//! table). The client stops waiting at its `statement_timeout`; the server must not run the
//! step later, when the row is let go, behind the caller's back.

#![cfg(feature = "postgres")]

use std::thread;
use std::time::Duration;

use dlock_test_support::postgres_server::{PostgresServer, RowsHeld};
use dlock_test_support::server_cases::ServerEnv;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::LockClient;

/// An acquire whose attempts all waited for the name's row until its caller gave up: the
/// caller is told it did not get the lock, and once the row is let go, nothing it sent makes
/// a hold afterwards. Else the lock stays taken for a whole lease by a hold nobody has.
#[test]
fn an_acquire_given_up_while_it_waits_for_a_row_makes_no_hold_later() {
    let server = PostgresServer::start();
    let client = LockClient::new(
        server
            .backend_builder()
            .statement_timeout(Duration::from_millis(300))
            .build()
            .expect("backend"),
    );
    let lock = client.lock("abandoned:acquire");
    let row = RowsHeld::hold_made(&server.url(), lock.name());
    let acquired = lock.try_lock_for(Duration::from_secs(1));
    no_hold_once_let_go(&server, row, lock.name(), acquired);
}

/// The same when the connection failed under the first attempt while it waited (reset by the
/// network): the server notices a lost client only when it answers, so the attempt waits on,
/// while the copy sent again waits too, until the caller gives up. Neither may make the hold
/// when the row is let go.
#[test]
fn an_acquire_whose_connection_failed_while_it_waited_makes_no_hold_after_its_caller_gave_up() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let lock = client.lock("abandoned:severed");
    let row = RowsHeld::hold_made(&server.url(), lock.name());
    let acquired = thread::scope(|scope| {
        scope.spawn(|| {
            server.await_lock_waits(1);
            proxy.sever();
        });
        lock.try_lock_for(Duration::from_secs(1))
    });
    no_hold_once_let_go(&server, row, lock.name(), acquired);
}

/// The acquire of `name` was given up (`acquired`) while `row` was held: once the row is let
/// go and the server has run what it still had, the lock is free for another client.
fn no_hold_once_let_go<T: std::fmt::Debug>(
    server: &PostgresServer,
    row: RowsHeld,
    name: &str,
    acquired: Result<Option<T>, dlocks::LockError>,
) {
    assert!(
        !matches!(acquired, Ok(Some(_))),
        "the row was held all along: {acquired:?}"
    );
    // What the server does with the steps it still has is up to it; the caller has gone.
    row.let_go();
    server.await_no_lock_waits();
    let other = LockClient::new(server.backend());
    assert!(
        other.lock(name).try_lock().expect("try").is_some(),
        "a step the caller gave up on took the lock after it had gone"
    );
}
