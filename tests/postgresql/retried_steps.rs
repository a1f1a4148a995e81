//! A step sent again while its first attempt is still at work on the server: the connection
//! failed under it (reset by the network) while the first attempt waited for a row another
//! transaction held. The client sends the step again at once, on a new connection, and that
//! copy must answer as the first attempt did, not find what the first attempt did and answer
//! from that.
//!
//! The row is held by a transaction of the test's own (standing for a slow server: another
//! session's long step on the same lock).

#![cfg(feature = "postgres")]

use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::ServerEnv;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::postgres::DEFAULT_SCHEMA;

/// Holds `name`'s row of the locks table (made if there is none, as a count-down latch that
/// is open) in a transaction of its own, until dropped.
struct RowHeld {
    admin: postgres::Client,
}

impl RowHeld {
    fn hold(server: &PostgresServer, name: &str) -> RowHeld {
        let mut admin = server.admin();
        admin
            .execute(
                &format!(
                    "INSERT INTO \"{DEFAULT_SCHEMA}\".locks (name, family) VALUES ($1, 'l') \
                     ON CONFLICT (name) DO NOTHING"
                ),
                &[&name],
            )
            .expect("the row");
        admin.batch_execute("BEGIN").expect("begin");
        admin
            .execute(
                &format!("SELECT 1 FROM \"{DEFAULT_SCHEMA}\".locks WHERE name = $1 FOR UPDATE"),
                &[&name],
            )
            .expect("the row held");
        RowHeld { admin }
    }

    fn let_go(mut self) {
        self.admin.batch_execute("COMMIT").expect("commit");
    }
}

/// Waits (bounded: 10 s) until `count` of the client's sessions wait for a lock on the server.
fn await_waiting(server: &PostgresServer, count: i64) {
    let mut admin = server.admin();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = 'dlock' AND wait_event_type = 'Lock'",
                &[],
            )
            .expect("pg_stat_activity")
            .get(0);
        if waiting >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{count} sessions never waited ({waiting} do)"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `step` (on this thread: a guard stays on its thread) while its first attempt waits on
/// `name`'s row: the connection is cut under it, the copy sent again waits too, then the row is
/// let go.
fn with_the_first_attempt_at_work<T>(
    server: &PostgresServer,
    proxy: &TcpProxy,
    name: &str,
    step: impl FnOnce() -> T,
) -> T {
    let row = RowHeld::hold(server, name);
    thread::scope(|scope| {
        let faults = scope.spawn(move || {
            await_waiting(server, 1);
            proxy.sever();
            await_waiting(server, 2);
            row.let_go();
        });
        let answer = step();
        faults.join().expect("the faults");
        answer
    })
}

#[test]
fn a_set_once_step_sent_again_while_its_first_attempt_works_answers_as_that_attempt() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let name = "retried:latch";
    let latch = client.count_down_latch(name);
    let set = with_the_first_attempt_at_work(&server, &proxy, name, || latch.try_set_count(2));
    assert!(
        set.expect("the step"),
        "the first attempt set the count: the copy must say so"
    );
    assert_eq!(latch.count().expect("count"), 2);
}

#[test]
fn a_release_sent_again_while_its_first_attempt_works_answers_released() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let name = "retried:read";
    let rw = client.read_write_lock(name);
    let guard = rw.read_lock().lock().expect("read");
    let released = with_the_first_attempt_at_work(&server, &proxy, name, || guard.unlock());
    released.expect("the first attempt released the hold: the copy must say so");
    assert!(rw.write_lock().try_lock().expect("try").is_some());
}

/// A reentrant lock's release keeps no latch: sent again, it answers from what became of the
/// hold (released, since it is not among the holds that ended otherwise), after the first
/// attempt's delete is done.
#[test]
fn a_reentrant_release_sent_again_while_its_first_attempt_works_answers_released() {
    let server = PostgresServer::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let name = "retried:reentrant";
    let lock = client.lock(name);
    let guard = lock.lock().expect("lock");
    let released = with_the_first_attempt_at_work(&server, &proxy, name, || guard.unlock());
    released.expect("the first attempt released the hold: the copy must say so");
    assert!(lock.try_lock().expect("try").is_some());
}
