//! The PostgreSQL schema: created on first use (by several processes at once), versioned, or
//! created by a DBA for a lock user with only the rights docs/postgres.md lists; names of any
//! length and the database's encoding.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::postgres::{grant_sql, schema_sql, schema_sql_for, Durability, PostgresBackend};
use dlocks::{LockClient, LockClientBuilder, LockError, MultiLock};
use support::postgres_server::PostgresServer;

fn version(server: &PostgresServer, schema: &str) -> String {
    server
        .admin()
        .query_one(
            &format!("SELECT value FROM {schema}.meta WHERE key = 'version'"),
            &[],
        )
        .expect("the version row")
        .get(0)
}

#[test]
fn processes_starting_at_once_create_the_schema_once_and_all_use_it() {
    let server = PostgresServer::start();
    let backends: Vec<PostgresBackend> = std::thread::scope(|s| {
        let starting: Vec<_> = (0..4)
            .map(|_| s.spawn(|| server.backend_builder().schema("together").build()))
            .collect();
        starting
            .into_iter()
            .map(|handle| handle.join().expect("thread").expect("each one connects"))
            .collect()
    });
    assert_eq!(
        version(&server, "together"),
        dlocks::postgres::SCHEMA_VERSION.to_string()
    );
    let (a, b) = (
        LockClient::new(backends[0].clone()),
        LockClient::new(backends[3].clone()),
    );
    let held = a.lock("shared").lock().expect("lock");
    assert!(
        b.lock("shared").try_lock().expect("try").is_none(),
        "one schema, one lock"
    );
    held.unlock().expect("unlock");
}

#[test]
fn a_user_who_may_not_create_it_is_told_how_to_get_it() {
    let server = PostgresServer::start();
    server.execute("CREATE ROLE app LOGIN");
    let url = server.url_for("app", "unused");
    let error = PostgresBackend::builder(&url)
        .create_schema(false)
        .build()
        .expect_err("no schema");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(
        error.to_string().contains("dlock postgres-schema"),
        "says what to run: {error}"
    );
    let error = PostgresBackend::connect(&url).expect_err("may not create it");
    assert!(
        matches!(error, LockError::Protocol { .. }),
        "permission denied: {error:?}"
    );
}

#[test]
fn a_lock_user_with_only_the_listed_rights_uses_every_kind() {
    let server = PostgresServer::start();
    server.execute(&schema_sql("locks").expect("sql"));
    server.execute("CREATE ROLE app LOGIN");
    server.execute(&grant_sql("locks", "app").expect("grants"));
    let backend = PostgresBackend::builder(&server.url_for("app", "unused"))
        .schema("locks")
        .create_schema(false)
        .build()
        .expect("the lock user connects");
    let unit = Duration::from_millis(200);
    let client = LockClientBuilder::new(Arc::new(backend.clone()))
        .watchdog_lease(unit * 6)
        .build()
        .expect("client");
    let other = LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(unit * 6)
        .build()
        .expect("client");

    let plain = client.lock("plain").lock().expect("reentrant");
    let fenced = client.fenced_lock("fenced").lock().expect("fenced");
    assert!(fenced.token() > 0);
    let fair = client.fair_lock("fair").lock().expect("fair");
    let rw = client.read_write_lock("rw");
    let read = rw.read_lock().lock().expect("read");
    // A waiter queues, listens, and is woken by the release.
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            other
                .fair_lock("fair")
                .try_lock_for(unit * 50)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        let plain_waiter = s.spawn(|| {
            other
                .lock("plain")
                .try_lock_for(unit * 50)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        std::thread::sleep(unit * 7); // past a renewal tick
        fair.unlock().expect("fair unlock");
        plain.unlock().expect("unlock");
        assert_eq!(waiter.join().expect("fair waiter"), Some(true));
        assert_eq!(plain_waiter.join().expect("waiter"), Some(true));
    });
    assert!(
        !read.is_lost() && !fenced.is_lost(),
        "renewed by the lock user"
    );
    let set = MultiLock::new([other.lock("m1"), other.lock("m2")]);
    set.lock().expect("multi").unlock().expect("multi unlock");
    assert!(other
        .read_write_lock("rw")
        .read_lock()
        .force_unlock()
        .expect("force"));
    // The synchronizers.
    let sem = other.semaphore("sem");
    assert!(sem.try_set_permits(1).expect("set permits"));
    let permit = sem.acquire().expect("permit");
    assert_eq!(sem.available_permits().expect("available"), 0);
    permit.release().expect("permit release");
    let latch = other.count_down_latch("latch");
    assert!(latch.try_set_count(1).expect("set count"));
    latch.count_down().expect("count down");
    assert!(latch.wait_for(unit).expect("await"), "open");
    let election = other.leader_election("election");
    let leading = election.campaign("node-a").expect("campaign");
    assert_eq!(
        election.leader().expect("leader").as_deref(),
        Some("node-a")
    );
    leading.resign().expect("resign");
    fenced.unlock().expect("unlock");
}

#[test]
fn a_newer_schema_is_refused_and_an_older_one_upgraded() {
    let server = PostgresServer::start();
    server.backend();
    server.execute("UPDATE dlock.meta SET value = '999' WHERE key = 'version'");
    let error = PostgresBackend::connect(&server.url()).expect_err("newer");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("999"), "{error}");

    server.execute("UPDATE dlock.meta SET value = '0' WHERE key = 'version'");
    let error = server
        .backend_builder()
        .create_schema(false)
        .build()
        .expect_err("older, and may not upgrade");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    server.backend();
    assert_eq!(
        version(&server, "dlock"),
        dlocks::postgres::SCHEMA_VERSION.to_string()
    );
}

#[test]
fn names_of_every_length_are_distinct_locks_and_nul_is_refused() {
    let server = PostgresServer::start();
    let unit = Duration::from_millis(200);
    let (a, b) = (
        LockClient::new(server.backend()),
        LockClient::new(server.backend()),
    );
    // Names longer than a notification carries travel as their hash: two that differ only at
    // the end are two locks, and the waiter of each is woken by its own release.
    let long = "n".repeat(dlocks::MAX_NAME_LEN - 1);
    let (first, second) = (format!("{long}1"), format!("{long}2"));
    let held = a.lock(first.clone()).lock().expect("lock");
    let other = a.lock(second.clone()).lock().expect("another lock");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            b.lock(first.clone())
                .try_lock_for(unit * 100)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        // The waiter listens (its subscription returns once it does) before the release.
        server.await_listeners(1);
        held.unlock().expect("unlock");
        assert_eq!(waiter.join().expect("waiter"), Some(true));
    });
    other.unlock().expect("unlock");
    let error = a.lock("with\0nul").try_lock().expect_err("NUL");
    assert!(
        matches!(
            error,
            LockError::InvalidArgument {
                argument: "name",
                ..
            }
        ),
        "{error:?}"
    );
    let unicode = a.lock("ordres:été:🔒").lock().expect("any UTF-8");
    assert!(b.lock("ordres:été:🔒").try_lock().expect("try").is_none());
    unicode.unlock().expect("unlock");
}

#[test]
fn a_database_that_is_not_utf8_is_refused() {
    let server = PostgresServer::start();
    server.execute(
        "CREATE DATABASE latin ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/latin", server.port());
    let error = PostgresBackend::connect(&url).expect_err("LATIN1");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("UTF8"), "{error}");
}

#[test]
fn two_schemas_keep_two_sets_of_locks() {
    let server = PostgresServer::start();
    let a = LockClient::new(
        server
            .backend_builder()
            .schema("team_a")
            .build()
            .expect("a"),
    );
    let b = LockClient::new(
        server
            .backend_builder()
            .schema("team_b")
            .build()
            .expect("b"),
    );
    let held = a.lock("same-name").lock().expect("lock");
    let also = b
        .lock("same-name")
        .try_lock()
        .expect("try")
        .expect("another schema");
    also.unlock().expect("unlock");
    held.unlock().expect("unlock");
}

/// The tables of schema `schema` that are not `UNLOGGED`.
fn logged_tables(server: &PostgresServer, schema: &str) -> Vec<String> {
    server
        .admin()
        .query(
            "SELECT c.relname::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relpersistence <> 'u' \
             ORDER BY 1",
            &[&schema],
        )
        .expect("the schema's tables")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn ephemeral(server: &PostgresServer, schema: &str) -> Result<PostgresBackend, LockError> {
    server
        .backend_builder()
        .schema(schema)
        .synchronous_commit(Durability::Ephemeral)
        .build()
}

/// `Durability::Ephemeral` keeps every lease table unlogged (only `meta`, read at connect, is
/// logged), and a crash of the server empties them: a lock held before it is free after it.
#[test]
fn an_ephemeral_schema_keeps_leases_unlogged_and_a_crash_drops_them() {
    let mut server = PostgresServer::start();
    let holder = LockClient::new(ephemeral(&server, "cache_locks").expect("ephemeral"));
    assert_eq!(logged_tables(&server, "cache_locks"), ["meta"]);
    let held = holder
        .lock("refill")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let semaphore = holder.semaphore("slots");
    assert!(semaphore.try_set_permits(2).expect("set"));
    let permit = semaphore.acquire().expect("permit");
    let other = LockClient::new(ephemeral(&server, "cache_locks").expect("ephemeral"));
    assert!(other.lock("refill").try_lock().expect("try").is_none());

    server.kill();
    server.restart();
    let after = LockClient::new(ephemeral(&server, "cache_locks").expect("ephemeral"));
    let taken = after
        .lock("refill")
        .try_lock()
        .expect("try")
        .expect("the crash dropped the lease");
    assert_eq!(
        after
            .semaphore("slots")
            .available_permits()
            .expect("permits"),
        0,
        "the semaphore's permits went with the crash too"
    );
    taken.unlock().expect("unlock");
    drop((held, permit));
}

/// One schema's lease tables are all logged or all unlogged: a backend of the other sort is
/// refused with a configuration error that says so, before it takes anything.
#[test]
fn a_schema_of_the_other_sort_is_refused() {
    let server = PostgresServer::start();
    ephemeral(&server, "cache_locks").expect("ephemeral");
    let error = server
        .backend_builder()
        .schema("cache_locks")
        .build()
        .expect_err("a durable backend on unlogged tables");
    assert!(
        matches!(&error, LockError::Config { message, .. } if message.contains("unlogged")),
        "{error:?}"
    );
    server.backend(); // the default schema, logged
    let error = ephemeral(&server, "dlock").expect_err("an ephemeral backend on logged tables");
    assert!(
        matches!(&error, LockError::Config { message, .. } if message.contains("logged")),
        "{error:?}"
    );
    // The printed SQL of the other sort refuses to run on it too.
    let error = server
        .admin()
        .batch_execute(&schema_sql("cache_locks").expect("sql"))
        .expect_err("logged SQL on an unlogged schema");
    assert_eq!(
        error.code().map(|code| code.code()),
        Some("DL003"),
        "{error:?}"
    );
    assert_eq!(logged_tables(&server, "cache_locks"), ["meta"]);
    assert_eq!(
        schema_sql_for("dlock", Durability::Ephemeral)
            .expect("sql")
            .matches("CREATE UNLOGGED TABLE")
            .count(),
        11
    );
}

/// A backend that may not create the schema writes nothing when it opens a database: a missing
/// schema stays missing and an older one stays at its version, each with an error that says
/// what makes it. With `durability_from_schema`, the schema found decides whether the backend
/// is ephemeral, and it shares the locks of the backends that made it.
#[test]
fn a_backend_that_may_not_create_writes_nothing_and_takes_the_schemas_sort() {
    let server = PostgresServer::start();
    let reader = |schema: &str| {
        server
            .backend_builder()
            .schema(schema)
            .create_schema(false)
            .durability_from_schema(true)
            .build()
    };
    let error = reader("dlock").expect_err("no schema");
    let message = error.to_string();
    assert!(
        message.contains("dlock postgres-schema") && message.contains("create_schema(true)"),
        "says what makes it: {message}"
    );
    let schemas: i64 = server
        .admin()
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'dlock'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(schemas, 0, "nothing was created");

    let durable = server.backend();
    server.execute("UPDATE dlock.meta SET value = '3' WHERE key = 'version'");
    let error = reader("dlock").expect_err("an older schema");
    assert!(error.to_string().contains("version 3"), "{error}");
    assert_eq!(version(&server, "dlock"), "3", "not upgraded");
    server.execute(&format!(
        "UPDATE dlock.meta SET value = '{}' WHERE key = 'version'",
        dlocks::postgres::SCHEMA_VERSION
    ));
    drop(durable);

    let ephemeral_holder = LockClient::new(ephemeral(&server, "cache_locks").expect("ephemeral"));
    let held = ephemeral_holder.lock("refill").lock().expect("lock");
    let on_ephemeral = reader("cache_locks").expect("either sort is taken");
    assert_eq!(on_ephemeral.durability(), Durability::Ephemeral);
    let on_logged = reader("dlock").expect("either sort is taken");
    assert_eq!(on_logged.durability(), Durability::On);
    let other = LockClient::new(on_ephemeral);
    assert!(
        other.lock("refill").try_lock().expect("try").is_none(),
        "the same locks as the schema's own backends"
    );
    held.unlock().expect("unlock");
    assert!(other.lock("refill").try_lock().expect("try").is_some());
}

/// A schema of version 9 (whose `_unless_ended` took no batch place) is upgraded: its function
/// of the old arguments goes, and batches and single acquires run on the new one.
#[test]
fn a_version_9_schema_is_upgraded_to_the_batch_places() {
    let server = PostgresServer::start();
    server.backend();
    server.execute(
        "CREATE FUNCTION dlock._unless_ended(p_name text, p_owner text) RETURNS boolean \
         LANGUAGE sql AS 'SELECT true'; \
         UPDATE dlock.meta SET value = '9' WHERE key = 'version'",
    );
    let client = LockClient::new(server.backend());
    assert_eq!(
        version(&server, "dlock"),
        dlocks::postgres::SCHEMA_VERSION.to_string()
    );
    let overloads: i64 = server
        .admin()
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'dlock' AND p.proname = '_unless_ended'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(overloads, 1, "the old arguments' function is dropped");
    let both = MultiLock::new([client.lock("upgraded:a"), client.lock("upgraded:b")]);
    both.lock()
        .expect("a batch acquire")
        .unlock()
        .expect("unlock");
    let one = client.lock("upgraded:a").lock().expect("an acquire");
    one.unlock().expect("unlock");
}
