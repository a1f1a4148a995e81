//! Whose release PostgreSQL announces on a read-write lock: a release is announced (`NOTIFY`)
//! only when the row says a waiter was refused, so every refusal must leave that word where the
//! release that ends it will read it, whatever transaction it raced with.

#![cfg(feature = "postgres")]

use std::time::Duration;

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::ServerEnv;
use dlocks::postgres::DEFAULT_SCHEMA;
use postgres::fallible_iterator::FallibleIterator;

/// Lease and mark lengths, µs: long enough that nothing runs out during the test.
const LONG_US: i64 = 60_000_000;

/// One acquire step of the schema's own function; whether it took the lock.
fn acquire(con: &mut postgres::Client, kind: &str, name: &str, owner: &str) -> bool {
    let sql = format!(
        "SELECT acquired FROM \"{DEFAULT_SCHEMA}\".acquire($1::text::\"char\", $2, $3, $4, \
         NULL, $5, true, $5, 0, 0, false, 'on')"
    );
    let waiter = format!("{owner}-waiter");
    con.query_one(&sql, &[&kind, &name, &owner, &waiter, &LONG_US])
        .expect("acquire")
        .get(0)
}

fn release(con: &mut postgres::Client, kind: &str, name: &str, owner: &str, request: i64) {
    let sql = format!(
        "SELECT \"{DEFAULT_SCHEMA}\".release($1::text::\"char\", $2, $3, $4, false, 0, 'on')"
    );
    con.query_one(&sql, &[&kind, &name, &owner, &request])
        .expect("release");
}

/// A server with the schema, made as a client makes it.
fn server_with_schema() -> PostgresServer {
    let server = PostgresServer::start();
    server
        .client()
        .lock("rw-wake:schema")
        .lock()
        .expect("lock")
        .unlock()
        .expect("unlock");
    server
}

/// Whether `owner`'s release (as `con`, request `request`) is announced to a listener.
fn release_is_heard(
    server: &PostgresServer,
    con: &mut postgres::Client,
    kind: &str,
    name: &str,
    owner: &str,
    request: i64,
) -> bool {
    let mut listener = server.admin();
    listener
        .batch_execute(&format!("LISTEN \"{DEFAULT_SCHEMA}\""))
        .expect("LISTEN");
    release(con, kind, name, owner, request);
    let heard = listener
        .notifications()
        .timeout_iter(Duration::from_secs(5))
        .next()
        .expect("notifications");
    heard.is_some()
}

/// A writer is refused while the lock is free, for a reader marked behind the last writer
/// (it goes first); that very reader is going in meanwhile, in a transaction the writer's
/// does not see yet. The writer waits for the reader's release to be announced: it is.
#[test]
fn a_writer_refused_for_a_reader_going_in_meanwhile_hears_its_release() {
    let server = server_with_schema();
    let name = "rw-wake:turn";
    let (mut writers, mut reader) = (server.admin(), server.admin());
    // A reader refused behind a writer's hold marks itself: it goes in before the next writer.
    assert!(acquire(&mut writers, "w", name, "w0"));
    assert!(!acquire(&mut reader, "r", name, "r1"));
    release(&mut writers, "w", name, "w0", 1);
    // Its turn: it goes in, not committed yet.
    reader.batch_execute("BEGIN").expect("BEGIN");
    assert!(acquire(&mut reader, "r", name, "r1"));
    // The next writer sees the lock free and the reader's mark: refused, it waits.
    assert!(!acquire(&mut writers, "w", name, "w1"));
    reader.batch_execute("COMMIT").expect("COMMIT");
    assert!(
        release_is_heard(&server, &mut reader, "r", name, "r1", 2),
        "the reader's release was not announced: the refused writer sleeps until it tries again"
    );
    assert!(acquire(&mut writers, "w", name, "w1"), "the writer goes in");
}

/// A writer asking while another writer waits (marked) finds the lock free and is refused:
/// the writer marked first goes in, and its release is heard by the one marked after it.
#[test]
fn a_writer_asking_while_another_waits_is_refused_and_hears_its_release() {
    let server = server_with_schema();
    let name = "rw-wake:turn-of-writers";
    let (mut first, mut waiting, mut next) = (server.admin(), server.admin(), server.admin());
    assert!(acquire(&mut first, "w", name, "w0"));
    assert!(!acquire(&mut waiting, "w", name, "w1"), "refused, it waits");
    release(&mut first, "w", name, "w0", 1);
    // Before the waiting writer tries again, another asks: the lock is free, but not its turn.
    assert!(
        !acquire(&mut next, "w", name, "w2"),
        "a writer does not go in past a writer marked before it"
    );
    assert!(
        acquire(&mut waiting, "w", name, "w1"),
        "the first marked goes in"
    );
    assert!(
        release_is_heard(&server, &mut waiting, "w", name, "w1", 2),
        "the release was not announced: the writer marked next sleeps until it tries again"
    );
    assert!(
        acquire(&mut next, "w", name, "w2"),
        "the next writer goes in"
    );
}
