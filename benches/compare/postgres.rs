//! Section 10: the PostgreSQL backend on a server of its own (fsync on), against the round trip
//! (`SELECT 1`) and the hand-written alternative (`pg_advisory_lock` + `pg_advisory_unlock` on
//! one connection), sampled alternately; hand-off between threads and between processes; the
//! watchdog with 10,000 holds.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::{AcquireRequest, DistributedLock, HoldRef, LockRef, OwnerId};
use dlocks::postgres::{Durability, PostgresBackend};
use dlocks::{LockClient, LockClientBuilder};

use crate::handoff::{self, Kind, Plan};
use crate::report::Report;
use crate::stats::{interleaved, us, Alternated};
use crate::support::postgres_server::{PostgresServer, ServerOptions};

fn client(url: &str, schema: &str, durability: Durability) -> LockClient {
    LockClient::new(
        PostgresBackend::builder(url)
            .schema(schema)
            .synchronous_commit(durability)
            .build()
            .expect("backend"),
    )
}

/// One row inserted and deleted, a prepared statement each, on a connection of its own with
/// `synchronous_commit` as given: what a lock step cannot go below.
struct BarePair {
    con: postgres::Client,
    insert: postgres::Statement,
    delete: postgres::Statement,
}

impl BarePair {
    fn new(url: &str, table: &str, unlogged: &str, sync: &str) -> BarePair {
        let mut con = plain(url);
        con.batch_execute(&format!(
            "CREATE {unlogged} TABLE {table} (name text COLLATE \"C\" PRIMARY KEY, \
             owner text NOT NULL, expires_at timestamptz NOT NULL); \
             SET synchronous_commit = {sync}"
        ))
        .expect("the bare pair's table");
        let insert = con
            .prepare(&format!(
                "INSERT INTO {table} VALUES ($1, $2, clock_timestamp() + interval '30 s')"
            ))
            .expect("prepare");
        let delete = con
            .prepare(&format!(
                "DELETE FROM {table} WHERE name = $1 AND owner = $2"
            ))
            .expect("prepare");
        BarePair {
            con,
            insert,
            delete,
        }
    }

    fn pair(&mut self) {
        let (name, owner) = ("bench:pg:bare", "bench-bare:1");
        assert_eq!(
            self.con
                .execute(&self.insert, &[&name, &owner])
                .expect("insert"),
            1
        );
        assert_eq!(
            self.con
                .execute(&self.delete, &[&name, &owner])
                .expect("delete"),
            1
        );
    }
}

fn plain(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("a plain connection")
}

pub fn section(report: &mut Report, samples: usize, secs: &dyn Fn(f64) -> Duration) {
    // A durable commit is the disk's flush: fsync on, as in production.
    let server = PostgresServer::start_with(ServerOptions {
        fsync: true,
        ..ServerOptions::default()
    });
    let url = server.url();
    let version: String = plain(&url)
        .query_one("SHOW server_version", &[])
        .map(|row| row.get(0))
        .unwrap_or_default();
    report.note(&format!(
        "\nPostgreSQL {version} on 127.0.0.1:{} (fsync on), its own server",
        server.port()
    ));

    let mut ping = plain(&url);
    let select = ping.prepare("SELECT 1").expect("prepare");
    let mut advisory = plain(&url);
    let lock = advisory
        .prepare("SELECT pg_advisory_lock(42)")
        .expect("prepare");
    let unlock = advisory
        .prepare("SELECT pg_advisory_unlock(42)")
        .expect("prepare");
    // The floor of a durable lease: one row inserted and deleted, a statement each, with the
    // lock row's shape, in a logged and in an unlogged table.
    let mut bare_off = BarePair::new(&url, "bench_bare", "", "off");
    let mut bare_unlogged = BarePair::new(&url, "bench_bare_unlogged", "UNLOGGED", "off");
    let mut bare_local = BarePair::new(&url, "bench_bare_local", "", "local");
    let mut bare_on = BarePair::new(&url, "bench_bare_on", "", "on");
    let off = client(&url, "dlock", Durability::Off);
    let ephemeral = client(&url, "dlock_ephemeral", Durability::Ephemeral);
    let local = client(&url, "dlock", Durability::Local);
    let on = client(&url, "dlock", Durability::On);
    let (off_lock, ephemeral_lock, local_lock, on_lock) = (
        off.lock("bench:pg:off"),
        ephemeral.lock("bench:pg:ephemeral"),
        local.lock("bench:pg:local"),
        on.lock("bench:pg:on"),
    );

    let mut select_1 = || {
        ping.query_one(&select, &[]).expect("SELECT 1");
    };
    let mut advisory_pair = || {
        advisory.query_one(&lock, &[]).expect("lock");
        advisory.query_one(&unlock, &[]).expect("unlock");
    };
    let mut pair_off = || {
        off_lock.lock().expect("lock").unlock().expect("unlock");
    };
    let mut pair_ephemeral = || {
        ephemeral_lock
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
    };
    let raw_backend = PostgresBackend::builder(&url)
        .synchronous_commit(Durability::Off)
        .build()
        .expect("backend");
    let raw_owner = OwnerId::from_raw("bench-raw:1");
    let raw_request = AcquireRequest::new(
        LockRef::reentrant("bench:pg:raw"),
        &raw_owner,
        Duration::from_secs(30),
    );
    let mut steps_off = || {
        assert!(raw_backend
            .try_acquire(&raw_request)
            .expect("acquire")
            .is_acquired());
        raw_backend
            .release(LockRef::reentrant("bench:pg:raw"), &raw_owner)
            .expect("release");
    };
    let mut pair_local = || {
        local_lock.lock().expect("lock").unlock().expect("unlock");
    };
    let mut pair_on = || {
        on_lock.lock().expect("lock").unlock().expect("unlock");
    };
    let fast = interleaved(
        samples / 10,
        samples,
        &mut [
            &mut select_1,
            &mut advisory_pair,
            &mut || bare_off.pair(),
            &mut pair_off,
            &mut steps_off,
            &mut || bare_unlogged.pair(),
            &mut pair_ephemeral,
        ],
    );
    // A flushed commit costs the disk's flush, milliseconds: fewer samples.
    let durable = interleaved(
        5,
        (samples / 20).max(50),
        &mut [
            &mut select_1,
            &mut || bare_local.pair(),
            &mut pair_local,
            &mut || bare_on.pair(),
            &mut pair_on,
        ],
    );
    let rtt = fast.summary(0).p50_us;
    let advisory_p50 = fast.summary(1).p50_us;
    report.heading(
        "10a. PostgreSQL: round trip, the hand-written advisory-lock pair, a bare INSERT + DELETE \
         of one row, and dlock's pair by durability (sampled alternately)",
        &[
            "call",
            "p50",
            "p99",
            "p50 / SELECT 1",
            "p50 / advisory pair",
            "p50 / bare pair, same durability",
        ],
    );
    let row = |report: &mut Report, what: &str, run: &Alternated, at: usize, bare: Option<f64>| {
        let summary = run.summary(at);
        report.row(&[
            what.into(),
            us(summary.p50_us),
            us(summary.p99_us),
            format!("{:.2}", summary.p50_us / rtt),
            format!("{:.2}", summary.p50_us / advisory_p50),
            bare.map_or_else(
                || "-".into(),
                |bare| format!("{:.2}", summary.p50_us / bare),
            ),
        ]);
    };
    let bare_off_p50 = fast.summary(2).p50_us;
    let bare_unlogged_p50 = fast.summary(5).p50_us;
    row(report, "`SELECT 1`", &fast, 0, None);
    row(
        report,
        "`pg_advisory_lock` + `pg_advisory_unlock`, one connection",
        &fast,
        1,
        None,
    );
    row(
        report,
        "bare `INSERT` + `DELETE` of one row, synchronous_commit = off",
        &fast,
        2,
        None,
    );
    row(
        report,
        "dlock lock + unlock, synchronous_commit = off",
        &fast,
        3,
        Some(bare_off_p50),
    );
    row(
        report,
        "the same two steps through the backend alone (no client), off",
        &fast,
        4,
        Some(bare_off_p50),
    );
    row(
        report,
        "bare `INSERT` + `DELETE` of one row, UNLOGGED table",
        &fast,
        5,
        None,
    );
    row(
        report,
        "dlock lock + unlock, Durability::Ephemeral (UNLOGGED tables)",
        &fast,
        6,
        Some(bare_unlogged_p50),
    );
    report.note(&format!(
        "  (the durable rows' own `SELECT 1` p50 in their run: {}; their ratios to the advisory \
         pair use the fast run's)",
        us(durable.summary(0).p50_us)
    ));
    let (bare_local_p50, bare_on_p50) = (durable.summary(1).p50_us, durable.summary(3).p50_us);
    row(
        report,
        "bare `INSERT` + `DELETE` of one row, synchronous_commit = local",
        &durable,
        1,
        None,
    );
    row(
        report,
        "dlock lock + unlock, synchronous_commit = local",
        &durable,
        2,
        Some(bare_local_p50),
    );
    row(
        report,
        "bare `INSERT` + `DELETE` of one row, synchronous_commit = on",
        &durable,
        3,
        None,
    );
    row(
        report,
        "dlock lock + unlock, synchronous_commit = on (default)",
        &durable,
        4,
        Some(bare_on_p50),
    );
    for (what, pair, bare) in [
        ("off", fast.summary(3).p50_us, bare_off_p50),
        ("ephemeral", fast.summary(6).p50_us, bare_unlogged_p50),
    ] {
        let (to_advisory, to_bare) = (pair / advisory_p50, pair / bare);
        report.note(&format!(
            "  goal, {what}: pair <= 3 x the advisory pair ({to_advisory:.2}: {}) and <= 1.5 x \
             the bare pair ({to_bare:.2}: {})",
            if to_advisory <= 3.0 { "met" } else { "not met" },
            if to_bare <= 1.5 { "met" } else { "not met" },
        ));
    }

    report.heading(
        "10b. PostgreSQL forced hand-off (1 ms hold, synchronous_commit = off)",
        &[
            "workers",
            "hand-offs/s",
            "hand-off p50",
            "p50 / SELECT 1",
            "p99",
            "acquisitions per worker (min-max)",
        ],
    );
    let run = secs(3.0);
    for (label, outcome) in [
        (
            "2 threads, one client",
            handoff::run_threads(&off, "bench:pg:handoff", plan(2, run)),
        ),
        (
            "8 threads, one client",
            handoff::run_threads(&off, "bench:pg:handoff8", plan(8, run)),
        ),
        (
            "2 processes",
            handoff::run_processes(&url, "bench:pg:handoff-p", plan(2, run)),
        ),
        (
            "8 processes",
            handoff::run_processes(&url, "bench:pg:handoff-p8", plan(8, run)),
        ),
    ] {
        report.row(&[
            label.into(),
            format!("{:.0}", outcome.handoffs_per_s),
            us(outcome.latency.p50_us),
            format!("{:.1}", outcome.latency.p50_us / rtt),
            us(outcome.latency.p99_us),
            format!("{}-{}", outcome.per_worker_min, outcome.per_worker_max),
        ]);
    }

    report.heading(
        "10c. PostgreSQL watchdog: one renewal call for every hold of a client",
        &[
            "holds",
            "renewal calls per tick",
            "one renewal call (all holds) p50",
            "a bare UPDATE of as many rows p50",
            "renewal / bare",
            "holds lost",
        ],
    );
    for holds in [1_000, 10_000] {
        let (calls_per_tick, renew, lost) = watchdog(&url, holds);
        let bare = bare_update(&url, holds);
        report.row(&[
            holds.to_string(),
            format!("{calls_per_tick:.1}"),
            us(renew),
            us(bare),
            format!("{:.2}", renew / bare),
            lost.to_string(),
        ]);
    }
    report.note("  goal: 10,000 holds renewed in <= 30 ms (synchronous_commit = off)");
}

/// The p50 of one `UPDATE` extending `rows` rows' lease, named in one array (off): the floor
/// of a renewal.
fn bare_update(url: &str, rows: usize) -> f64 {
    let mut con = plain(url);
    let table = format!("bench_renew_{rows}");
    con.batch_execute(&format!(
        "CREATE TABLE {table} (name text COLLATE \"C\" PRIMARY KEY, owner text NOT NULL, \
         expires_at timestamptz NOT NULL) WITH (fillfactor = 70); \
         INSERT INTO {table} SELECT 'bench:pg:bare:' || i, 'owner', clock_timestamp() \
         FROM generate_series(1, {rows}) AS i; \
         SET synchronous_commit = off"
    ))
    .expect("the bare renewal's table");
    let names: Vec<String> = (1..=rows).map(|i| format!("bench:pg:bare:{i}")).collect();
    let owners = vec!["owner"; rows];
    let update = con
        .prepare(&format!(
            "UPDATE {table} t SET expires_at = clock_timestamp() + interval '3 s' \
             FROM unnest($1::text[], $2::text[]) AS h(name, owner) \
             WHERE t.name = h.name AND t.owner = h.owner"
        ))
        .expect("prepare");
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let updated = con.execute(&update, &[&names, &owners]).expect("update");
        times.push(started.elapsed());
        assert_eq!(updated as usize, rows);
    }
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e6
}

fn plan(workers: usize, run_for: Duration) -> Plan {
    Plan {
        workers,
        run_for,
        hold: Duration::from_millis(1),
        forced: true,
        kind: Kind::Plain,
    }
}

/// `holds` locks held by one client through several watchdog ticks: backend calls per tick,
/// the time of one renewal of all of them, and how many were lost.
fn watchdog(url: &str, holds: usize) -> (f64, f64, u64) {
    let backend = PostgresBackend::builder(url)
        .synchronous_commit(Durability::Off)
        .pool_size(8)
        .statement_timeout(Duration::from_secs(10))
        .build()
        .expect("backend");
    let lease = Duration::from_millis(3000); // a tick every second
    let client = LockClientBuilder::new(Arc::new(backend.clone()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let prefix = uuid::Uuid::new_v4();
    thread::scope(|s| {
        for t in 0..4 {
            let client = &client;
            s.spawn(move || {
                for i in (t..holds).step_by(4) {
                    client
                        .lock(format!("bench:pg:wd:{prefix}:{i}"))
                        .lock()
                        .expect("lock")
                        .leak();
                }
            });
        }
    });
    let wait_tick = |from: u64| {
        let deadline = Instant::now() + lease * 2;
        while client.watchdog_stats().ticks == from && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
    };
    wait_tick(client.watchdog_stats().ticks);
    let start = client.watchdog_stats();
    let mut seen = start.ticks;
    for _ in 0..3 {
        wait_tick(seen);
        seen = client.watchdog_stats().ticks;
    }
    let end = client.watchdog_stats();
    let calls = (end.batches - start.batches) as f64 / (end.ticks - start.ticks).max(1) as f64;
    // One renewal of as many holds of one owner, timed on its own.
    let owner = OwnerId::from_raw(format!("bench-renewer-{prefix}:1"));
    let names: Vec<String> = (0..holds)
        .map(|i| format!("bench:pg:renew:{prefix}:{i}"))
        .collect();
    for chunk in names.chunks(1000) {
        let requests: Vec<AcquireRequest<'_>> = chunk
            .iter()
            .map(|name| AcquireRequest::new(LockRef::reentrant(name), &owner, lease))
            .collect();
        backend.try_acquire_many(&requests).expect("acquire");
    }
    let refs: Vec<HoldRef<'_>> = names
        .iter()
        .map(|name| HoldRef {
            lock: LockRef::reentrant(name),
            owner: &owner,
        })
        .collect();
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let renewed = backend.renew(&refs, lease).expect("renew");
        times.push(started.elapsed());
        assert!(renewed
            .iter()
            .all(|r| *r == dlocks::backend::Renewal::Renewed));
    }
    times.sort();
    let p50 = times[times.len() / 2].as_secs_f64() * 1e6;
    (calls, p50, end.lost)
}
