//! Section 11: the async surface against the blocking API, sampled in turns on the same
//! machine state: the uncontended pair (memory, Redis, PostgreSQL) and the hand-off between
//! tasks against the hand-off between threads. Built with the `async` feature only.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    round_trip_floors(report, &runtime, redis_url, samples);
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

/// Two `PING`s on a plain TCP connection to the server: a thread's blocking round trips.
fn two_pings(stream: &mut TcpStream) {
    let mut reply = [0u8; 7];
    for _ in 0..2 {
        stream.write_all(b"PING\r\n").expect("PING");
        stream.read_exact(&mut reply).expect("PONG");
    }
}

/// The median of `runs` runs of `op` in a task of `runtime`, in µs.
fn task_block<Op, Done>(runtime: &tokio::runtime::Runtime, runs: usize, mut op: Op) -> f64
where
    Op: FnMut() -> Done + Send + 'static,
    Done: std::future::Future<Output = ()> + Send,
{
    runtime
        .block_on(runtime.spawn(async move {
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                let start = Instant::now();
                op().await;
                samples.push(start.elapsed());
            }
            Summary::of(&samples).p50_us
        }))
        .expect("a block")
}

/// A thread other than the task's that takes part in its `PING`s.
enum Elsewhere {
    /// Makes each `PING` and wakes the task.
    Handed(PingThread),
    /// Reads each answer of a `PING` the task wrote, and wakes the task.
    Read(ReaderThread),
}

impl Elsewhere {
    async fn two_pings(&self) {
        match self {
            Elsewhere::Handed(thread) => thread.two_pings().await,
            Elsewhere::Read(thread) => thread.two_pings().await,
        }
    }
}

/// [`task_block`] of two `PING`s made with `elsewhere`'s thread.
fn elsewhere_block(
    runtime: &tokio::runtime::Runtime,
    runs: usize,
    elsewhere: &Arc<Elsewhere>,
) -> f64 {
    let elsewhere = elsewhere.clone();
    task_block(runtime, runs, move || {
        let elsewhere = elsewhere.clone();
        async move { elsewhere.two_pings().await }
    })
}

/// An answer a thread gives a task: given once, the task woken.
#[derive(Default)]
struct Answer {
    given: Mutex<(bool, Option<Waker>)>,
}

impl Answer {
    fn give(&self) {
        let waker = {
            let mut given = self.given.lock().expect("answer");
            given.0 = true;
            given.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    async fn wait(&self) {
        std::future::poll_fn(|cx| {
            let mut given = self.given.lock().expect("answer");
            if given.0 {
                Poll::Ready(())
            } else {
                given.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
    }
}

/// A connection whose replies a thread of its own reads (blocked in `read`, as a poller would
/// wait for it), waking the task that wrote the request: non-blocking I/O on a store client's
/// own thread, the task writing and the thread only reading.
struct ReaderThread {
    stream: Mutex<TcpStream>,
    waiting: Arc<Mutex<Option<Arc<Answer>>>>,
}

impl ReaderThread {
    fn start(address: &str) -> ReaderThread {
        let stream = TcpStream::connect(address).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut replies = stream.try_clone().expect("clone");
        let waiting: Arc<Mutex<Option<Arc<Answer>>>> = Arc::default();
        let answered = waiting.clone();
        std::thread::spawn(move || {
            let mut reply = [0u8; 7];
            while replies.read_exact(&mut reply).is_ok() {
                let Some(answer) = answered.lock().expect("waiting").take() else {
                    return;
                };
                answer.give();
            }
        });
        ReaderThread {
            stream: Mutex::new(stream),
            waiting,
        }
    }

    /// Two `PING`s, each written by the task, the task woken by the thread that read its answer.
    async fn two_pings(&self) {
        for _ in 0..2 {
            let answer = Arc::new(Answer::default());
            *self.waiting.lock().expect("waiting") = Some(answer.clone());
            self.stream
                .lock()
                .expect("stream")
                .write_all(b"PING\r\n")
                .expect("PING");
            answer.wait().await;
        }
    }
}

/// A `PING` for a [`PingThread`] to make on its connection.
type PingJob = Box<dyn FnOnce(&mut TcpStream) + Send>;

/// A thread that makes the `PING`s handed to it and wakes the task that asked: the way a
/// future's store step reaches a store that is read with blocking calls.
struct PingThread {
    jobs: std::sync::mpsc::Sender<PingJob>,
}

impl PingThread {
    fn start(address: &str) -> PingThread {
        let mut stream = TcpStream::connect(address).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (jobs, queue) = std::sync::mpsc::channel::<PingJob>();
        std::thread::spawn(move || {
            for job in queue {
                job(&mut stream);
            }
        });
        PingThread { jobs }
    }

    /// Two `PING`s, each made on the thread, the task woken by its answer.
    async fn two_pings(&self) {
        for _ in 0..2 {
            let answer = Arc::new(Answer::default());
            let answered = answer.clone();
            self.jobs
                .send(Box::new(move |stream: &mut TcpStream| {
                    let mut reply = [0u8; 7];
                    stream.write_all(b"PING\r\n").expect("PING");
                    stream.read_exact(&mut reply).expect("PONG");
                    answered.give();
                }))
                .expect("the thread");
            answer.wait().await;
        }
    }
}

/// 11c: what a future's two round trips cost before any lock is involved: two `PING`s on a
/// plain thread, in a task through the runtime's own I/O (`tokio::net`), in a task that writes
/// each and is woken by a thread that reads the answers (non-blocking I/O on a client's own
/// thread), and in a task that hands each `PING` to a thread and is woken by it (dlock's
/// futures reach a store so: the library has no runtime and reads its stores with blocking
/// calls), blocks of each in turns. The floor of 11a's ratio for each way of reaching a store.
fn round_trip_floors(
    report: &mut Report,
    runtime: &tokio::runtime::Runtime,
    redis_url: &str,
    samples: usize,
) {
    report.heading(
        "11c. Two `PING`s: a plain thread, a task through the runtime's own I/O, a task woken by \
         a thread that reads the answers, a task handing each to a thread (as dlock's futures \
         reach a store), blocks of each in turns",
        &[
            "two PINGs",
            "p50",
            "/ the plain thread's (median block, low–high)",
        ],
    );
    let address = redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let per_block = (samples / 10).max(100);
    let mut plain = TcpStream::connect(&address).expect("connect");
    plain.set_nodelay(true).expect("nodelay");
    let mut thread = || block(per_block, || two_pings(&mut plain));
    let mut native = || {
        let address = address.clone();
        runtime
            .block_on(runtime.spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(address)
                    .await
                    .expect("connect");
                stream.set_nodelay(true).expect("nodelay");
                let mut samples = Vec::with_capacity(per_block);
                let mut reply = [0u8; 7];
                for _ in 0..per_block {
                    let start = Instant::now();
                    for _ in 0..2 {
                        stream.write_all(b"PING\r\n").await.expect("PING");
                        stream.read_exact(&mut reply).await.expect("PONG");
                    }
                    samples.push(start.elapsed());
                }
                Summary::of(&samples).p50_us
            }))
            .expect("a block")
    };
    let handed_to = Arc::new(Elsewhere::Handed(PingThread::start(&address)));
    let mut handed = || elsewhere_block(runtime, per_block, &handed_to);
    let read_by = Arc::new(Elsewhere::Read(ReaderThread::start(&address)));
    let mut read_elsewhere = || elsewhere_block(runtime, per_block, &read_by);
    thread();
    native();
    read_elsewhere();
    handed();
    let turns = in_turns(
        10,
        &mut [&mut thread, &mut native, &mut read_elsewhere, &mut handed],
    );
    for (row, what) in [
        "on a plain thread",
        "in a task, through the runtime's own I/O",
        "in a task that writes it, woken by a thread that reads the answer",
        "in a task, each handed to a thread that wakes it",
    ]
    .into_iter()
    .enumerate()
    {
        report.row(&[
            what.into(),
            us(turns.summary(row).p50_us),
            turns.ratio(row, 0).to_string(),
        ]);
    }
}
