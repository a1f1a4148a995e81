//! One run: a fault in one lock mode, from starting the servers to checking the history.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::checker::{self, Findings};
use crate::history::{self, now_us};
use crate::injector;
use crate::options::{FaultKind, Mode, Options};
use crate::register::RegisterServer;
use crate::seeded_bug::SeededBug;
use crate::service::LockService;
use crate::worker::WorkerSpec;
use crate::worker_pool::WorkerPool;

/// The timing of a run, derived from the lease.
pub struct Timing {
    pub lease: Duration,
    /// How long one acquire waits.
    pub wait: Duration,
    /// The longest work inside the critical section, between the read and the write (each
    /// operation's is drawn between 1 ms and this).
    pub work: Duration,
    pub response_timeout: Duration,
    pub replica_sync_timeout: Duration,
    /// Workers run this long before the fault.
    pub warmup: Duration,
    /// And this long after the planned end of the fault.
    pub after: Duration,
}

impl Timing {
    pub fn for_lease(lease: Duration) -> Timing {
        Timing {
            lease,
            wait: lease * 2,
            work: lease / 4,
            response_timeout: (lease / 2).max(Duration::from_millis(200)),
            replica_sync_timeout: (lease / 4).max(Duration::from_millis(100)),
            warmup: lease.max(Duration::from_millis(500)),
            after: lease * 3 + Duration::from_secs(1),
        }
    }

    /// The longest one call may take: the wait, then the last attempt's response time (twice,
    /// for a retry on a new connection) and the replicas' acknowledgement, and a second for
    /// the machine.
    pub fn call_bound(&self) -> Duration {
        self.wait + self.response_timeout * 2 + self.replica_sync_timeout + Duration::from_secs(1)
    }
}

/// Runs `fault` with the workers in `mode`; `dir` holds the logs.
pub fn run(options: &Options, fault: FaultKind, mode: Mode, dir: &Path) -> Findings {
    let timing = Timing::for_lease(options.lease);
    let mut service = LockService::start(options.backend, options.topology, fault);
    let register_server = match RegisterServer::start(options.register) {
        Ok(server) => server,
        Err(error) => {
            return Findings {
                notes: vec![format!("could not set the register up: {error}")],
                recovery: None,
                ..Findings::default()
            }
        }
    };
    let start_us = now_us() + 300_000;
    let first_us = start_us + timing.warmup.as_micros() as u64;
    // Steps delivered late at the end of the fault may make holds nobody waits for (an acquire
    // its caller gave up on), which keep the lock a lease: the round leaves time for them.
    let settle = match fault {
        FaultKind::LateSteps => timing.lease * 2,
        _ => std::time::Duration::ZERO,
    };
    let round_us =
        (injector::planned_length(fault, timing.lease) + timing.after + settle).as_micros() as u64;
    let rounds: Vec<u64> = (0..options.rounds as u64)
        .map(|round| first_us + round * round_us)
        .collect();
    let mut until_us = first_us + round_us * options.rounds as u64;
    let until_path = dir.join("until_us");
    // Left by an earlier run in the same directory: its stop is not this run's.
    let _ = std::fs::remove_file(&until_path);
    let spec = WorkerSpec {
        lock_url: service.url(),
        register_url: register_server.url(),
        threads: options.threads,
        mode,
        lease: timing.lease,
        wait: timing.wait,
        work: timing.work,
        response_timeout: timing.response_timeout,
        replica_sync: fault != FaultKind::FailoverUnsynced
            && options.seeded_bug != Some(SeededBug::SkipReplicaAck),
        replica_sync_timeout: timing.replica_sync_timeout,
        until_us,
        until_path: until_path.display().to_string(),
        log_path: String::new(),
        seeded_bug: options.seeded_bug,
        reply_faults: rounds
            .iter()
            .flat_map(|&at| injector::reply_windows(fault, timing.lease, at))
            .collect(),
    };
    let mut workers = match WorkerPool::start(spec, dir, options.processes) {
        Ok(workers) => workers,
        Err(error) => {
            return Findings {
                notes: vec![format!("could not start the workers: {error}")],
                recovery: None,
                ..Findings::default()
            }
        }
    };
    let mut windows = Vec::new();
    for &at in &rounds {
        sleep_until(at);
        // The workers go on while the fault lasts, however long it takes (a delivery of late
        // steps waiting for the server's answers, say); their stop is set again after it.
        let open_until = now_us() + round_us + OVERRUN.as_micros() as u64;
        if let Err(error) = write_until(&until_path, open_until.max(until_us)) {
            eprintln!("could not move the workers' stop: {error}");
        }
        let injected = Instant::now();
        windows.extend(injector::inject(
            fault,
            timing.lease,
            &mut service,
            &mut workers,
            &register_server.url(),
        ));
        let planned = injector::planned_length(fault, timing.lease);
        if injected.elapsed() > planned + Duration::from_secs(1) {
            eprintln!(
                "{}: the fault lasted {:?}, planned {planned:?}",
                fault.name(),
                injected.elapsed()
            );
        }
        // A fault that outlasted its plan (a promotion that took long on a loaded machine)
        // still gets its time after it: progress is judged there, not in a run already over.
        let needed =
            windows.iter().map(|w| w.end_us).max().unwrap_or(0) + timing.after.as_micros() as u64;
        until_us = until_us.max(needed);
        if let Err(error) = write_until(&until_path, until_us) {
            eprintln!("could not move the workers' stop: {error}");
        }
    }
    // Each worker finishes the operation it is in after `until_us`: at most one call bound.
    let stop_by = Instant::now()
        + Duration::from_micros(until_us.saturating_sub(now_us()))
        + timing.call_bound() * 2
        + Duration::from_secs(2);
    let (ending, logs) = workers.finish(stop_by);
    let mut records = Vec::new();
    for log in &logs {
        match history::read_records(log) {
            Ok(found) => records.extend(found),
            Err(error) => eprintln!("could not read {}: {error}", log.display()),
        }
    }
    let log = register_server.read_log().unwrap_or_else(|error| {
        eprintln!("could not read the register's log: {error}");
        Vec::new()
    });
    checker::check(&records, &log, &windows, ending, mode, timing.call_bound())
}

/// How long past its plan a fault may run with the workers still going; a fault longer than
/// that finds them stopped, and its row says no progress resumed after it.
const OVERRUN: Duration = Duration::from_secs(60);

/// Writes `until_us` to `path` whole (a worker never reads half of it).
fn write_until(path: &Path, until_us: u64) -> std::io::Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, until_us.to_string())?;
    std::fs::rename(&partial, path)
}

fn sleep_until(at_us: u64) {
    let now = now_us();
    if at_us > now {
        std::thread::sleep(Duration::from_micros(at_us - now));
    }
}
