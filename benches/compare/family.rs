//! The lock family: fair against plain hand-off across processes, the long fairness run, and
//! read-write mixes (how long readers and writers wait, and whether writers starve).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, ReadWriteLock};

use crate::handoff::{self, Kind, Outcome, Plan};
use crate::stats::Summary;

/// Forced hand-off (1 ms hold) among `workers` processes on one lock of `kind`.
pub fn processes(url: &str, kind: Kind, workers: usize, run_for: Duration) -> Outcome {
    let plan = Plan {
        workers,
        run_for,
        hold: Duration::from_millis(1),
        forced: true,
        kind,
    };
    let name = format!("bench:family:{}", uuid::Uuid::new_v4());
    handoff::run_processes(url, &name, plan)
}

/// The uncontended pair (`lock()` + `unlock()`) of `kind` on a name of its own, from one
/// client: what a hand-off's release and the next holder's claim cost without the message
/// between them.
pub fn uncontended_pair(url: &str, kind: Kind, iterations: usize) -> Summary {
    let client = handoff::connect(url, kind.hand_off()).expect("client");
    let name = format!("bench:family-pair:{}", uuid::Uuid::new_v4());
    crate::stats::time_each(iterations / 10, iterations, || {
        kind.lock(&client, &name)
            .expect("lock")
            .unlock()
            .expect("unlock")
    })
}

/// What a read-write mix measured, per side.
pub struct MixOutcome {
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    pub read_wait: Summary,
    pub write_wait: Summary,
    pub longest_write_wait_us: f64,
}

/// `readers` and `writers` threads on Redis at `url`, each a client of its own (as separate
/// services), each looping: take its side of one read-write lock, hold it `hold`, release, and
/// again at once.
pub fn read_write_mix(
    url: &str,
    readers: usize,
    writers: usize,
    hold: Duration,
    run_for: Duration,
) -> MixOutcome {
    let connect = || RedisBackend::connect(url).ok().map(LockClient::new);
    read_write_mix_on(&connect, readers, writers, hold, run_for)
}

/// The same mix on any backend: `connect` makes each worker's client (`None`: it could not).
pub fn read_write_mix_on(
    connect: &(dyn Fn() -> Option<LockClient> + Sync),
    readers: usize,
    writers: usize,
    hold: Duration,
    run_for: Duration,
) -> MixOutcome {
    let name = format!("bench:rw:{}", uuid::Uuid::new_v4());
    let stop = Arc::new(AtomicBool::new(false));
    // Every worker, and this thread, start the measured run together.
    let start = Barrier::new(readers + writers + 1);
    // No worker's client goes (its connections closed, its sessions ended) before every worker
    // is out of its loop: a client's teardown is not a wait among continuous readers.
    let done = Barrier::new(readers + writers);
    let mut started = Instant::now();
    let (reads, writes): (Vec<Vec<f64>>, Vec<Vec<f64>>) = thread::scope(|s| {
        let spawn = |write: bool| {
            let (stop, name, start, done) = (stop.clone(), name.clone(), &start, &done);
            s.spawn(move || {
                let client = connect();
                let rw = client.as_ref().map(|client| client.read_write_lock(name));
                let take = |rw: &ReadWriteLock| {
                    if write {
                        rw.write_lock().lock()
                    } else {
                        rw.read_lock().lock()
                    }
                };
                // A client's first acquisition makes its connections, prepares its statements
                // and listens on the name: a new client's cost, not a wait among the others.
                let warm = rw.as_ref().is_some_and(|rw| take(rw).is_ok());
                start.wait();
                let mut waits = Vec::new();
                if let Some(rw) = rw.filter(|_| warm) {
                    while !stop.load(Ordering::Relaxed) {
                        let tried = Instant::now();
                        let Ok(guard) = take(&rw) else { break };
                        waits.push(tried.elapsed().as_secs_f64() * 1e6);
                        thread::sleep(hold);
                        drop(guard);
                    }
                }
                done.wait();
                waits
            })
        };
        let readers: Vec<_> = (0..readers).map(|_| spawn(false)).collect();
        let writers: Vec<_> = (0..writers).map(|_| spawn(true)).collect();
        start.wait();
        started = Instant::now();
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
        let join = |handles: Vec<thread::ScopedJoinHandle<'_, Vec<f64>>>| {
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        };
        (join(readers), join(writers))
    });
    let elapsed = started.elapsed().as_secs_f64();
    let reads: Vec<f64> = reads.into_iter().flatten().collect();
    let writes: Vec<f64> = writes.into_iter().flatten().collect();
    let longest_write_wait_us = writes.iter().copied().fold(0.0, f64::max);
    MixOutcome {
        reads_per_s: reads.len() as f64 / elapsed,
        writes_per_s: writes.len() as f64 / elapsed,
        read_wait: Summary::of_us(reads),
        write_wait: Summary::of_us(writes),
        longest_write_wait_us,
    }
}
