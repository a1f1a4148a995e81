//! Hand-off under contention: workers (threads or processes) taking turns on one lock.
//!
//! Every worker logs, per acquisition, when it started trying, when it got the lock and when it
//! called release, on the system's real-time clock (shared by all processes of the machine).
//! Sorting every acquisition by time gives the sequence of holders; a hand-off is a change of
//! holder, and its latency runs from the previous holder's release call to the next holder's
//! acquire returning.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlocks::backend::DistributedLock;
use dlocks::redis::RedisBackend;
use dlocks::{HandOff, LockClient, LockError, LockGuard};

use crate::stats::Summary;

/// One acquisition: try start, acquired, release called (ns on the real-time clock).
#[derive(Debug, Clone, Copy)]
pub struct Acquisition {
    pub worker: usize,
    pub tried: u64,
    pub acquired: u64,
    pub released: u64,
}

/// How the workers behave.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub workers: usize,
    pub run_for: Duration,
    /// Time spent holding the lock.
    pub hold: Duration,
    /// After releasing, wait until another worker has held the lock.
    pub forced: bool,
    /// Which lock the workers take.
    pub kind: Kind,
}

/// The kind of lock a hand-off runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Fair,
    /// The plain lock of clients that queue its waiters (`HandOff::Queue`).
    QueuedPlain,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::QueuedPlain => "queued",
        }
    }

    fn parse(kind: &str) -> Kind {
        match kind {
            "fair" => Kind::Fair,
            "queued" => Kind::QueuedPlain,
            _ => Kind::Plain,
        }
    }

    /// How the worker's client passes its plain locks on.
    pub fn hand_off(self) -> HandOff {
        match self {
            Kind::QueuedPlain => HandOff::Queue,
            Kind::Plain | Kind::Fair => HandOff::Race,
        }
    }

    /// Takes the lock `name` of this kind, waiting as long as it takes, with a client made with
    /// [`hand_off`](Kind::hand_off).
    pub fn lock(self, client: &LockClient, name: &str) -> Result<LockGuard, LockError> {
        match self {
            Kind::Plain | Kind::QueuedPlain => client.lock(name).lock(),
            Kind::Fair => client.fair_lock(name).lock(),
        }
    }
}

/// What one hand-off run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub handoffs_per_s: f64,
    pub latency: Summary,
    pub longest_wait_us: f64,
    /// The longest wait among those begun once every worker had acquired once and ended
    /// before any worker stopped: while all of them contend, without the start (all begin
    /// at one instant) and the stop (workers leave, processes exit).
    pub contending_longest_wait_us: f64,
    pub per_worker_min: u64,
    pub per_worker_max: u64,
    /// Acquisitions by the worker that held the lock just before (re-takes).
    pub retake_share: f64,
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Turns the logs of all workers into the hand-off figures.
pub fn analyse(mut log: Vec<Acquisition>, workers: usize, elapsed: Duration) -> Outcome {
    log.sort_by_key(|a| a.acquired);
    let mut latencies = Vec::new();
    let mut retakes = 0usize;
    for pair in log.windows(2) {
        let (previous, next) = (pair[0], pair[1]);
        if previous.worker == next.worker {
            retakes += 1;
        } else {
            latencies.push(next.acquired.saturating_sub(previous.released) as f64 / 1000.0);
        }
    }
    let mut per_worker = vec![0u64; workers];
    for a in &log {
        per_worker[a.worker] += 1;
    }
    let wait_us = |a: &Acquisition| a.acquired.saturating_sub(a.tried) as f64 / 1000.0;
    let longest_wait_us = log.iter().map(wait_us).fold(0.0, f64::max);
    // Every worker's first acquisition, and its last release (after which it stops).
    let mut first_acquired = vec![u64::MAX; workers];
    let mut last_released = vec![0u64; workers];
    for a in &log {
        first_acquired[a.worker] = first_acquired[a.worker].min(a.acquired);
        last_released[a.worker] = last_released[a.worker].max(a.released);
    }
    let (all_in, first_out) = (
        first_acquired.iter().copied().max().unwrap_or(0),
        last_released.iter().copied().min().unwrap_or(0),
    );
    let contending_longest_wait_us = log
        .iter()
        .filter(|a| a.tried > all_in && a.acquired < first_out)
        .map(wait_us)
        .fold(0.0, f64::max);
    Outcome {
        handoffs_per_s: latencies.len() as f64 / elapsed.as_secs_f64(),
        latency: Summary::of_us(latencies),
        longest_wait_us,
        contending_longest_wait_us,
        per_worker_min: per_worker.iter().copied().min().unwrap_or(0),
        per_worker_max: per_worker.iter().copied().max().unwrap_or(0),
        retake_share: retakes as f64 / log.len().saturating_sub(1).max(1) as f64,
    }
}

/// Workers as threads of one client.
pub fn run_threads(client: &LockClient, name: &str, plan: Plan) -> Outcome {
    let holder = Arc::new(AtomicUsize::new(usize::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let started = std::time::Instant::now();
    let log: Vec<Acquisition> = thread::scope(|s| {
        let workers: Vec<_> = (0..plan.workers)
            .map(|worker| {
                let lock = client.lock(name);
                let (holder, stop) = (holder.clone(), stop.clone());
                s.spawn(move || {
                    let mut log = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let tried = now_ns();
                        let guard = match lock.lock() {
                            Ok(guard) => guard,
                            Err(error) => {
                                eprintln!("worker {worker}: lock failed: {error}");
                                break;
                            }
                        };
                        let acquired = now_ns();
                        holder.store(worker, Ordering::SeqCst);
                        if !plan.hold.is_zero() {
                            thread::sleep(plan.hold);
                        }
                        let released = now_ns();
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
                                thread::sleep(Duration::from_micros(50));
                            }
                        }
                    }
                    log
                })
            })
            .collect();
        thread::sleep(plan.run_for);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    analyse(log, plan.workers, started.elapsed())
}

/// The environment variable that turns the bench binary into a hand-off worker process.
pub const WORKER_ENV: &str = "DLOCK_BENCH_WORKER";

/// Workers as separate processes (this binary re-run), each its own client.
pub fn run_processes(url: &str, name: &str, plan: Plan) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(_) => return Outcome::default(),
    };
    let holder_path = std::env::temp_dir().join(format!(
        "dlock-bench-holder-{}-{}",
        std::process::id(),
        now_ns()
    ));
    if HolderFile::create(&holder_path).is_err() {
        return Outcome::default();
    }
    // All begin together, once started and each past its first acquisition.
    let start_at = now_ns() + 1_000_000_000;
    let children: Vec<_> = (0..plan.workers)
        .filter_map(|worker| {
            let spec = format!(
                "{url}|{name}|{worker}|{start_at}|{}|{}|{}|{}|{}",
                plan.run_for.as_millis(),
                plan.hold.as_micros(),
                plan.forced,
                plan.kind.as_str(),
                holder_path.display()
            );
            Command::new(&exe)
                .env(WORKER_ENV, spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .ok()
        })
        .collect();
    let mut log = Vec::new();
    for mut child in children {
        if let Some(out) = child.stdout.take() {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let f: Vec<u64> = line.split(' ').filter_map(|v| v.parse().ok()).collect();
                if let [worker, tried, acquired, released] = f[..] {
                    log.push(Acquisition {
                        worker: worker as usize,
                        tried,
                        acquired,
                        released,
                    });
                }
            }
        }
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(&holder_path);
    analyse(log, plan.workers, plan.run_for)
}

/// The body of a worker process: contend until the run is over, print the log.
pub fn worker_process(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let [url, name, worker, start_at, run_ms, hold_us, forced, kind, holder_path] = parts[..]
    else {
        eprintln!("bad worker spec {spec:?}");
        std::process::exit(2);
    };
    let parse = |v: &str| v.parse::<u64>().unwrap_or(0);
    let (worker, start_at) = (parse(worker) as usize, parse(start_at));
    let (run_for, hold) = (
        Duration::from_millis(parse(run_ms)),
        Duration::from_micros(parse(hold_us)),
    );
    let forced = forced == "true";
    let kind = Kind::parse(kind);
    let opened = connect(url, kind.hand_off()).and_then(|client| {
        let holder = HolderFile::open(holder_path.as_ref()).map_err(|error| error.to_string())?;
        Ok((client, holder))
    });
    let (client, holder) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            eprintln!("worker {worker}: {error}");
            std::process::exit(1);
        }
    };
    // A process's first acquisition opens its connections and its subscription: a new
    // client's cost, not a wait among the others. Made before the run starts.
    drop(kind.lock(&client, name));
    thread::sleep(Duration::from_nanos(start_at.saturating_sub(now_ns())));
    let end = now_ns() + run_for.as_nanos() as u64;
    let mut log = Vec::new();
    while now_ns() < end {
        let tried = now_ns();
        let guard = match kind.lock(&client, name) {
            Ok(guard) => guard,
            Err(error) => {
                // The run's figures lack this worker from here on: said, not hidden.
                eprintln!(
                    "worker {worker}: lock failed after {} acquisitions: {error}",
                    log.len()
                );
                break;
            }
        };
        let acquired = now_ns();
        if forced {
            holder.set(worker);
        }
        if !hold.is_zero() {
            thread::sleep(hold);
        }
        let released = now_ns();
        drop(guard);
        log.push((worker, tried, acquired, released));
        if forced {
            while let Some(current) = holder.get() {
                if current != worker || now_ns() >= end {
                    break;
                }
                thread::sleep(Duration::from_micros(100));
            }
        }
    }
    for (worker, tried, acquired, released) in log {
        println!("{worker} {tried} {acquired} {released}");
    }
}

/// A client on the server `url` names (Redis, or PostgreSQL with `synchronous_commit` off for
/// a `postgres://` URL), passing plain locks on as `hand_off` says.
pub fn connect(url: &str, hand_off: HandOff) -> Result<LockClient, String> {
    #[cfg(feature = "etcd")]
    if url.starts_with("http") {
        let backend = dlocks::etcd::EtcdBackend::connect(url).map_err(|error| error.to_string())?;
        return client(backend, hand_off);
    }
    if url.starts_with("postgres") {
        let backend = dlocks::postgres::PostgresBackend::builder(url)
            .synchronous_commit(dlocks::postgres::Durability::Off)
            .build()
            .map_err(|error| error.to_string())?;
        return client(backend, hand_off);
    }
    client(
        RedisBackend::connect(url).map_err(|error| error.to_string())?,
        hand_off,
    )
}

fn client(backend: impl DistributedLock, hand_off: HandOff) -> Result<LockClient, String> {
    LockClient::builder(backend)
        .lock_hand_off(hand_off)
        .build()
        .map_err(|error| error.to_string())
}

/// Who holds the lock, shared by the worker processes of a run through a file in the
/// machine's temporary directory (eight bytes, read and written in place). The bench's own
/// bookkeeping stays off the store it measures: a worker that just released polls it every
/// 100 µs until another holds, which on the store (a `GET`, a `SELECT`, an etcd range) ran
/// on the server during the very hand-off being timed.
struct HolderFile {
    file: std::fs::File,
}

impl HolderFile {
    /// Makes the file, held by no one.
    fn create(path: &std::path::Path) -> std::io::Result<HolderFile> {
        let holder = HolderFile {
            file: std::fs::File::create(path)?,
        };
        holder.file.write_all_at(&u64::MAX.to_le_bytes(), 0)?;
        Ok(holder)
    }

    /// Opens the file a run made.
    fn open(path: &std::path::Path) -> std::io::Result<HolderFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Ok(HolderFile { file })
    }

    fn set(&self, worker: usize) {
        let _ = self.file.write_all_at(&(worker as u64).to_le_bytes(), 0);
    }

    fn get(&self) -> Option<usize> {
        let mut bytes = [0; 8];
        self.file.read_exact_at(&mut bytes, 0).ok()?;
        let worker = u64::from_le_bytes(bytes);
        (worker != u64::MAX).then_some(worker as usize)
    }
}
