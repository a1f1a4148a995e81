//! Section 11: the async surface against the blocking API, sampled in turns on the same
//! machine state: the uncontended pair (memory, Redis, PostgreSQL) and the hand-off between
//! tasks against the hand-off between threads. Built with the `async` feature only.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::LockClient;

use crate::handoff::{self, Acquisition, Kind, Outcome, Plan};
use crate::report::Report;
use crate::stats::{in_turns, us, Summary};
use crate::support::postgres_server::PostgresServer;

/// A runtime like a service's.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

pub fn section(
    report: &mut Report,
    redis_url: &str,
    samples: usize,
    secs: &dyn Fn(f64) -> Duration,
) {
    let runtime = runtime();
    pairs(report, &runtime, redis_url, samples);
    handoffs(report, &runtime, redis_url, secs);
}

/// The median of `pairs` pairs made by `pair`, in µs.
fn block(pairs: usize, mut pair: impl FnMut()) -> f64 {
    let mut samples = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let start = Instant::now();
        pair();
        samples.push(start.elapsed());
    }
    Summary::of(&samples).p50_us
}

/// 11a: the uncontended pair, blocking (a thread's guard, an owned guard, on this thread, as a
/// threaded program makes them) and by futures (in a task of the runtime, as a service makes
/// them), in turns.
fn pairs(report: &mut Report, runtime: &tokio::runtime::Runtime, redis_url: &str, samples: usize) {
    report.heading(
        "11a. Uncontended pair: futures (`lock_async` + `unlock_async`, in a task on a 2-worker \
         runtime) against the blocking API (`lock()` + `unlock()`, `lock_owned()` + `unlock()`, \
         on a plain thread), blocks of each in turns",
        &[
            "backend",
            "blocking pair p50",
            "blocking owned pair p50",
            "async pair p50",
            "async / blocking (median block, low–high)",
            "async / blocking owned",
        ],
    );
    let postgres = PostgresServer::start();
    let backends: [(&str, LockClient); 3] = [
        ("memory", LockClient::new(dlocks::MemoryBackend::new())),
        (
            "Redis",
            LockClient::new(dlocks::redis::RedisBackend::connect(redis_url).expect("backend")),
        ),
        ("PostgreSQL", LockClient::new(postgres.backend())),
    ];
    for (label, client) in backends {
        let lock = client.lock(format!("bench:async-pair:{}", uuid::Uuid::new_v4()));
        let per_block = if label == "memory" {
            samples.max(100)
        } else {
            (samples / 20).max(50)
        };
        let mut blocking = || {
            block(per_block, || {
                lock.lock().expect("lock").unlock().expect("unlock")
            })
        };
        let mut owned = || {
            block(per_block, || {
                lock.lock_owned().expect("lock").unlock().expect("unlock")
            })
        };
        let mut futures = || {
            let lock = lock.clone();
            runtime
                .block_on(runtime.spawn(async move {
                    let mut samples = Vec::with_capacity(per_block);
                    for _ in 0..per_block {
                        let start = Instant::now();
                        let guard = lock.lock_async().await.expect("lock_async");
                        guard.unlock_async().await.expect("unlock_async");
                        samples.push(start.elapsed());
                    }
                    Summary::of(&samples).p50_us
                }))
                .expect("a block")
        };
        // A block of each first, unrecorded: connections, threads and caches warm.
        blocking();
        owned();
        futures();
        let turns = in_turns(10, &mut [&mut blocking, &mut owned, &mut futures]);
        report.row(&[
            label.into(),
            us(turns.summary(0).p50_us),
            us(turns.summary(1).p50_us),
            us(turns.summary(2).p50_us),
            turns.ratio(2, 0).to_string(),
            turns.ratio(2, 1).to_string(),
        ]);
    }
}

/// Workers as tasks of one client on the runtime: the same loop as `handoff::run_threads`,
/// with futures.
fn run_tasks(
    runtime: &tokio::runtime::Runtime,
    client: &LockClient,
    name: &str,
    plan: Plan,
) -> Outcome {
    let holder = Arc::new(AtomicUsize::new(usize::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..plan.workers)
        .map(|worker| {
            let lock = client.lock(name);
            let (holder, stop) = (holder.clone(), stop.clone());
            runtime.spawn(async move {
                let mut log = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let tried = handoff::now_ns();
                    let Ok(guard) = lock.lock_async().await else {
                        break;
                    };
                    let acquired = handoff::now_ns();
                    holder.store(worker, Ordering::SeqCst);
                    if !plan.hold.is_zero() {
                        tokio::time::sleep(plan.hold).await;
                    }
                    let released = handoff::now_ns();
                    drop(guard);
                    log.push(Acquisition {
                        worker,
                        tried,
                        acquired,
                        released,
                    });
                    if plan.forced {
                        while holder.load(Ordering::SeqCst) == worker
                            && !stop.load(Ordering::Relaxed)
                        {
                            tokio::time::sleep(Duration::from_micros(50)).await;
                        }
                    }
                }
                log
            })
        })
        .collect();
    std::thread::sleep(plan.run_for);
    stop.store(true, Ordering::Relaxed);
    let log: Vec<Acquisition> = tasks
        .into_iter()
        .flat_map(|task| runtime.block_on(task).unwrap_or_default())
        .collect();
    handoff::analyse(log, plan.workers, started.elapsed())
}

/// 11b: hand-off between tasks against hand-off between threads of one client, forced with a
/// 1 ms hold, runs in turns.
fn handoffs(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    redis_url: &str,
    secs: &dyn Fn(f64) -> Duration,
) {
    report.heading(
        "11b. Forced hand-off (1 ms hold) between tasks (futures, 2 runtime workers) against \
         hand-off between threads, one client, runs in turns",
        &[
            "backend",
            "workers",
            "threads: hand-off p50",
            "tasks: hand-off p50",
            "tasks / threads (median run, low–high)",
            "tasks: acquisitions per worker (min-max)",
        ],
    );
    let backends: [(&str, LockClient); 2] = [
        ("memory", LockClient::new(dlocks::MemoryBackend::new())),
        (
            "Redis",
            LockClient::new(dlocks::redis::RedisBackend::connect(redis_url).expect("backend")),
        ),
    ];
    for (label, client) in backends {
        for workers in [2, 8] {
            let plan = Plan {
                workers,
                run_for: secs(1.0),
                hold: Duration::from_millis(1),
                forced: true,
                kind: Kind::Plain,
            };
            let mut spread = (u64::MAX, 0);
            let mut threads = || {
                let name = format!("bench:async-handoff:{}", uuid::Uuid::new_v4());
                handoff::run_threads(&client, &name, plan).latency.p50_us
            };
            let mut tasks = || {
                let name = format!("bench:async-handoff:{}", uuid::Uuid::new_v4());
                let outcome = run_tasks(runtime, &client, &name, plan);
                spread = (
                    spread.0.min(outcome.per_worker_min),
                    spread.1.max(outcome.per_worker_max),
                );
                outcome.latency.p50_us
            };
            let turns = in_turns(3, &mut [&mut threads, &mut tasks]);
            report.row(&[
                label.into(),
                workers.to_string(),
                us(turns.summary(0).p50_us),
                us(turns.summary(1).p50_us),
                turns.ratio(1, 0).to_string(),
                format!("{}-{}", spread.0, spread.1),
            ]);
        }
    }
}
