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
use crate::stats::{interleaved, us};
use crate::support::postgres_server::{PostgresServer, ServerOptions};

fn client(url: &str, durability: Durability) -> LockClient {
    LockClient::new(
        PostgresBackend::builder(url)
            .synchronous_commit(durability)
            .build()
            .expect("backend"),
    )
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

    // Where hand-off worker processes note who holds the lock (outside the measured window).
    plain(&url)
        .batch_execute("CREATE TABLE bench_holder (name text PRIMARY KEY, worker bigint NOT NULL)")
        .expect("the hand-off workers' table");
    let mut ping = plain(&url);
    let select = ping.prepare("SELECT 1").expect("prepare");
    let mut advisory = plain(&url);
    let lock = advisory
        .prepare("SELECT pg_advisory_lock(42)")
        .expect("prepare");
    let unlock = advisory
        .prepare("SELECT pg_advisory_unlock(42)")
        .expect("prepare");
    let off = client(&url, Durability::Off);
    let local = client(&url, Durability::Local);
    let on = client(&url, Durability::On);
    let (off_lock, local_lock, on_lock) = (
        off.lock("bench:pg:off"),
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
    let mut direct = plain(&url);
    let acquire_sql = direct
        .prepare(
            "SELECT acquired, remaining_us, fencing_token FROM dlock.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .expect("prepare");
    let release_sql = direct
        .prepare("SELECT dlock.release($1, $2, $3, $4, $5, $6, $7)")
        .expect("prepare");
    let mut request_id = 0i64;
    let mut functions_off = || {
        let none: Option<i64> = None;
        let row = direct
            .query_one(
                &acquire_sql,
                &[
                    &(b'e' as i8),
                    &"bench:pg:direct",
                    &"direct:1",
                    &30_000_000i64,
                    &false,
                    &1000i64,
                    &none,
                    &none,
                    &"off",
                ],
            )
            .expect("acquire");
        assert!(row.get::<_, bool>(0));
        request_id += 1;
        direct
            .query_one(
                &release_sql,
                &[
                    &(b'e' as i8),
                    &"bench:pg:direct",
                    &"direct:1",
                    &request_id,
                    &false,
                    &(request_id - 1),
                    &"off",
                ],
            )
            .expect("release");
    };
    let fast = interleaved(
        samples / 10,
        samples,
        &mut [
            &mut select_1,
            &mut advisory_pair,
            &mut pair_off,
            &mut steps_off,
            &mut functions_off,
        ],
    );
    // A flushed commit costs the disk's flush, milliseconds: fewer samples.
    let durable = interleaved(
        5,
        (samples / 20).max(50),
        &mut [&mut select_1, &mut pair_local, &mut pair_on],
    );
    let rtt = fast.summary(0).p50_us;
    let advisory_p50 = fast.summary(1).p50_us;
    report.heading(
        "10a. PostgreSQL: round trip, the hand-written advisory-lock pair, and dlock's pair by \
         durability (sampled alternately)",
        &[
            "call",
            "p50",
            "p99",
            "p50 / SELECT 1",
            "p50 / advisory pair",
        ],
    );
    let row = |report: &mut Report, what: &str, p50: f64, p99: f64| {
        report.row(&[
            what.into(),
            us(p50),
            us(p99),
            format!("{:.2}", p50 / rtt),
            format!("{:.2}", p50 / advisory_p50),
        ]);
    };
    row(
        report,
        "`SELECT 1`",
        fast.summary(0).p50_us,
        fast.summary(0).p99_us,
    );
    row(
        report,
        "`pg_advisory_lock` + `pg_advisory_unlock`, one connection",
        fast.summary(1).p50_us,
        fast.summary(1).p99_us,
    );
    row(
        report,
        "dlock lock + unlock, synchronous_commit = off",
        fast.summary(2).p50_us,
        fast.summary(2).p99_us,
    );
    row(
        report,
        "the same two steps through the backend alone (no client), off",
        fast.summary(3).p50_us,
        fast.summary(3).p99_us,
    );
    row(
        report,
        "the same two functions called with the `postgres` crate, off",
        fast.summary(4).p50_us,
        fast.summary(4).p99_us,
    );
    report.note(&format!(
        "  (the durable rows' own `SELECT 1` p50 in their run: {})",
        us(durable.summary(0).p50_us)
    ));
    row(
        report,
        "dlock lock + unlock, synchronous_commit = local",
        durable.summary(1).p50_us,
        durable.summary(1).p99_us,
    );
    row(
        report,
        "dlock lock + unlock, synchronous_commit = on (default)",
        durable.summary(2).p50_us,
        durable.summary(2).p99_us,
    );

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
            "holds lost",
        ],
    );
    for holds in [1_000, 10_000] {
        let (calls_per_tick, renew, lost) = watchdog(&url, holds);
        report.row(&[
            holds.to_string(),
            format!("{calls_per_tick:.1}"),
            us(renew),
            lost.to_string(),
        ]);
    }
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
