//! Grants that prove themselves on PostgreSQL. A fair waiter on the watchdog's lease sends a
//! secret with its offer, which the store keeps in a schema of its own (`dlock$secrets`) that
//! the locks' readers are not given; the release that grants the offer sends it back, and the
//! waiter holds without a claim of its own, on the grant's 2 s lease, which its renewal makes
//! whole. A role that reads every lock table can neither read a secret, nor have one sent,
//! nor make its own count; a grant of the secrets' table to such a role turns the proofs off,
//! and so does an operator dropping the secrets' schema (the waiters claim, as before).

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::conformance::await_settled;
use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::store_queue::await_queued;
use dlocks::backend::DistributedLock;
use dlocks::postgres::DEFAULT_SCHEMA;
use dlocks::testing::{FaultyBackend, Op};
use dlocks::LockClient;

/// The watchdog's lease of every client here: a claim sets it whole on the store.
const LEASE: Duration = Duration::from_secs(30);

/// The grant's lease (`GrantOffer::MAX_LEASE`).
const GRANT: Duration = Duration::from_secs(2);

fn client(backend: Arc<dyn DistributedLock>) -> LockClient {
    LockClient::builder(backend)
        .watchdog_lease(LEASE)
        .build()
        .expect("client")
}

/// The client whose hold the waiter waits behind: its hold ids are `holder:<n>`.
const HOLDER: &str = "holder";

/// Who holds lock `name` on the store.
fn owner_on_store(server: &PostgresServer, name: &str) -> Option<String> {
    let sql = format!("SELECT owner FROM \"{DEFAULT_SCHEMA}\".locks WHERE name = $1");
    server
        .admin()
        .query_one(&sql, &[&name])
        .expect("the lock's row")
        .get(0)
}

/// What the store has left of the lease of lock `name`'s holder.
fn lease_on_store(server: &PostgresServer, name: &str) -> Duration {
    let sql = format!(
        "SELECT greatest(0, extract(epoch FROM expires_at - clock_timestamp()))::float8 \
         FROM \"{DEFAULT_SCHEMA}\".locks WHERE name = $1"
    );
    let row = server
        .admin()
        .query_one(&sql, &[&name])
        .expect("the lock's row");
    Duration::from_secs_f64(row.get(0))
}

/// The role `lock_monitor`, which may read every table of the lock schema and nothing else
/// (as a monitoring role is set up), connected.
fn monitor(server: &PostgresServer) -> postgres::Client {
    server.execute(&format!(
        "CREATE ROLE lock_monitor LOGIN PASSWORD 'monitor-secret'; \
         GRANT USAGE ON SCHEMA \"{DEFAULT_SCHEMA}\" TO lock_monitor; \
         GRANT SELECT ON ALL TABLES IN SCHEMA \"{DEFAULT_SCHEMA}\" TO lock_monitor;"
    ));
    postgres::Client::connect(
        &server.url_for("lock_monitor", "monitor-secret"),
        postgres::NoTls,
    )
    .expect("the monitoring role connects")
}

/// A holder's release hands fair lock `name` to a waiter asleep in the queue; `meanwhile` runs
/// once the waiter sleeps (given the waiter's backend), before the release. Answers what the
/// store had left of the waiter's lease as soon as its `lock()` returned, and whether the lock
/// stayed the waiter's once the grant's lease was over (no other client took it, the guard not
/// lost). Fails if the waiter's `lock()` returned while the store still had the holder's hold.
fn hand_over(
    server: &PostgresServer,
    name: &str,
    meanwhile: impl FnOnce(&FaultyBackend),
) -> (Duration, bool) {
    let holder = LockClient::builder(Arc::new(server.backend()))
        .client_id(HOLDER)
        .watchdog_lease(LEASE)
        .build()
        .expect("the holder's client");
    let observed = FaultyBackend::new(Arc::new(server.backend()));
    let waiter = client(Arc::new(observed.clone()));
    let other = client(Arc::new(server.backend()));
    let inspecting = server.backend();
    let held = holder.fair_lock(name).lock().expect("the holder locks");
    let (took, taken) = mpsc::channel();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let guard = waiter.fair_lock(name).lock().expect("the waiter locks");
            took.send(()).expect("told");
            let owner = owner_on_store(server, name).unwrap_or_default();
            assert!(
                !owner.starts_with(&format!("{HOLDER}:")),
                "the waiter believed it held the lock while the store had the holder's hold"
            );
            let lease = lease_on_store(server, name);
            // Past the grant's lease: still the waiter's.
            thread::sleep(GRANT + Duration::from_millis(500));
            let kept = !guard.is_lost()
                && other
                    .fair_lock(name)
                    .try_lock()
                    .expect("another client tries")
                    .is_none();
            guard.unlock().expect("the waiter lets go");
            (lease, kept)
        });
        assert!(await_queued(&inspecting, name, 1), "the waiter is queued");
        await_settled(&observed, 1);
        meanwhile(&observed);
        assert!(
            taken.try_recv().is_err(),
            "the waiter took the lock while the holder held it"
        );
        held.unlock().expect("the holder lets go");
        waiting.join().expect("the waiter")
    })
}

#[test]
fn a_grant_that_brings_the_offers_secret_back_is_held_without_a_claim() {
    let server = PostgresServer::start();
    let (lease, kept) = hand_over(&server, "proven:held", |_| {});
    // A claim would have set the whole 30 s lease.
    assert!(
        lease <= GRANT,
        "the store had {lease:?} of the waiter's lease: it claimed the grant"
    );
    assert!(kept, "the grant's hold was not kept past the grant's lease");
}

#[test]
fn a_reader_of_every_lock_table_cannot_read_send_or_plant_a_secret() {
    let server = PostgresServer::start();
    drop(server.backend()); // the schema
    let mut reader = monitor(&server);
    let error = reader
        .query("SELECT secret FROM \"dlock$secrets\".offers", &[])
        .expect_err("the reader reads the secrets");
    assert_eq!(
        error.code().map(|code| code.code()),
        Some("42501"),
        "{error:?}"
    );
    let name = "proven:reader";
    let (_, kept) = hand_over(&server, name, |observed| {
        let waiters = format!("\"{DEFAULT_SCHEMA}\".waiters");
        // The release's own function, asked for the waiter's offer while the holder holds.
        let sent: Vec<Option<String>> = reader
            .query(
                &format!(
                    "SELECT \"{DEFAULT_SCHEMA}\"._grant_proof(name, owner, wait_id, hold) \
                     FROM {waiters} WHERE name = $1"
                ),
                &[&name],
            )
            .expect("the reader calls _grant_proof")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(sent, [None], "a secret was given for a grant never made");
        // A secret of its own kept for the waiter's offer, and grants carrying it.
        for _ in 0..20 {
            let looks = observed.calls(Op::TryAcquire);
            reader
                .batch_execute(&format!(
                    "SELECT \"{DEFAULT_SCHEMA}\"._keep_secret(name, owner, wait_id, hold, \
                     'planted') FROM {waiters} WHERE name = '{name}'; \
                     SELECT pg_notify('dlock:' || left(encode(sha256(convert_to('{DEFAULT_SCHEMA}', \
                     'UTF8') || '\\x00'::bytea || convert_to(regexp_replace(owner, ':[^:]*$', ''), \
                     'UTF8')), 'hex'), 40), 'g' || wait_id || ':' || encode(sha256(convert_to(name, \
                     'UTF8') || '\\x00'::bytea || convert_to(owner, 'UTF8')), 'hex') || ':planted') \
                     FROM {waiters} WHERE name = '{name}';"
                ))
                .expect("the reader plants a secret and forges grants");
            // Woken, the waiter looks, and its look is answered (a fooled one would return
            // from `lock()` holding, which `hand_over` sees); the next round forges for its
            // new attempt.
            await_looked(observed, looks);
            await_settled(observed, 1);
        }
    });
    assert!(kept, "the waiter's hold was not kept");
}

/// Waits (10 s at most) until the waiter behind `observed` has tried more than `looks` times.
fn await_looked(observed: &FaultyBackend, looks: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    while observed.calls(Op::TryAcquire) <= looks {
        assert!(
            Instant::now() < until,
            "the waiter did not look again within 10 s"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// After `setup` (as the superuser), a hand-over is claimed: no proof came with the grant, and
/// the waiter's claim set its whole lease.
fn claimed_after(setup: &str) {
    let server = PostgresServer::start();
    drop(server.backend()); // the schema
    drop(monitor(&server));
    server.execute(setup);
    let (lease, kept) = hand_over(&server, "proven:off", |_| {});
    assert!(
        lease > LEASE - Duration::from_secs(5),
        "the store had {lease:?} of the waiter's lease: it believed a grant without a claim"
    );
    assert!(kept, "the claimed hold was not kept");
}

#[test]
fn a_secrets_table_a_reader_may_read_turns_the_proofs_off() {
    claimed_after(
        "GRANT USAGE ON SCHEMA \"dlock$secrets\" TO lock_monitor; \
         GRANT SELECT ON \"dlock$secrets\".offers TO lock_monitor;",
    );
}

#[test]
fn locks_work_on_without_proofs_when_the_secrets_schema_was_dropped() {
    claimed_after("DROP SCHEMA \"dlock$secrets\" CASCADE;");
}

/// How many secrets the store keeps.
fn secrets_kept(server: &PostgresServer) -> i64 {
    server
        .admin()
        .query_one("SELECT count(*) FROM \"dlock$secrets\".offers", &[])
        .expect("count the secrets")
        .get(0)
}

#[test]
fn no_secret_outlives_its_wait() {
    let server = PostgresServer::start();
    // Granted: the release that granted it took it.
    let (_, kept) = hand_over(&server, "proven:granted", |_| {});
    assert!(kept);
    assert_eq!(
        secrets_kept(&server),
        0,
        "a granted waiter's secret was left"
    );

    let holder = client(Arc::new(server.backend()));
    let inspecting = server.backend();
    let observed = FaultyBackend::new(Arc::new(server.backend()));
    let waiter = client(Arc::new(observed.clone()));
    // A waiter that gives up.
    let name = "proven:gave-up";
    let held = holder.fair_lock(name).lock().expect("the holder locks");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .fair_lock(name)
                .try_lock_for(Duration::from_secs(2))
                .expect("the waiter waits")
                .is_some()
        });
        assert!(await_queued(&inspecting, name, 1), "the waiter is queued");
        await_settled(&observed, 1);
        assert_eq!(
            secrets_kept(&server),
            1,
            "the waiter's offer has its secret"
        );
        assert!(
            !waiting.join().expect("the waiter"),
            "the waiter took a held lock"
        );
    });
    assert_eq!(
        secrets_kept(&server),
        0,
        "the secret of a waiter that gave up was left"
    );
    held.unlock().expect("the holder lets go");

    // A waiter that takes the lock itself: its holder's lease ran out, with no release.
    let name = "proven:taken";
    let held = holder
        .fair_lock(name)
        .lock_with_lease(Duration::from_secs(1))
        .expect("the holder locks for a second");
    let guard = waiter.fair_lock(name).lock().expect("the waiter locks");
    assert_eq!(
        secrets_kept(&server),
        0,
        "the secret of a waiter that took the lock was left"
    );
    guard.unlock().expect("the waiter lets go");
    drop(held);
}
