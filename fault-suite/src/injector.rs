//! Injecting the faults the controller owns (processes and servers), and how long each lasts.
//! Reply faults happen inside the workers, during the windows planned here.

use std::time::Duration;

use crate::history::now_us;
use crate::options::FaultKind;
use crate::register;
use crate::service::LockService;
use crate::worker::ReplyFaults;
use crate::worker_pool::WorkerPool;

/// When a fault was in effect, in wall-clock µs, and which worker it stopped, if any.
#[derive(Debug, Clone)]
pub struct FaultWindow {
    pub fault: FaultKind,
    pub start_us: u64,
    pub end_us: u64,
    /// A worker stopped by the fault: its calls in the window are not hangs.
    pub paused_pid: Option<u32>,
    /// What happened, when it did not go as planned (no holder found, say).
    pub note: Option<String>,
}

/// The parts of the mixed fault, in order (lost replies run alongside the first).
const MIXED: [FaultKind; 4] = [
    FaultKind::HolderPause,
    FaultKind::PubsubKill,
    FaultKind::ServerPause,
    FaultKind::ServerRestart,
];

/// How long `fault` is planned to last with watchdog lease `lease`.
pub fn planned_length(fault: FaultKind, lease: Duration) -> Duration {
    match fault {
        FaultKind::HolderPause | FaultKind::Partition | FaultKind::PartitionOneWay => lease * 3,
        FaultKind::HolderKill => Duration::ZERO,
        FaultKind::ServerRestart => Duration::from_millis(300),
        FaultKind::ServerPause => lease * 2,
        FaultKind::PubsubKill => lease * 5 / 2,
        FaultKind::SlowReplies
        | FaultKind::LostReplies
        | FaultKind::LateSteps
        | FaultKind::SlowNetwork
        | FaultKind::ClockJump => lease * 2,
        FaultKind::Failover | FaultKind::FailoverUnsynced => lease * 2 + Duration::from_millis(300),
        FaultKind::Mixed => MIXED
            .iter()
            .map(|part| planned_length(*part, lease) + mixed_gap(lease))
            .sum(),
    }
}

fn mixed_gap(lease: Duration) -> Duration {
    lease * 2
}

/// The reply-fault windows the workers apply themselves, for a fault starting at `start_us`.
pub fn reply_windows(fault: FaultKind, lease: Duration, start_us: u64) -> Vec<ReplyFaults> {
    let to_us = start_us + (lease * 2).as_micros() as u64;
    match fault {
        FaultKind::SlowReplies => vec![ReplyFaults {
            from_us: start_us,
            to_us,
            lose: false,
        }],
        FaultKind::LostReplies | FaultKind::Mixed => vec![ReplyFaults {
            from_us: start_us,
            to_us,
            lose: true,
        }],
        _ => Vec::new(),
    }
}

/// Injects `fault` now; returns when it is over (a server back, a process continued).
pub fn inject(
    fault: FaultKind,
    lease: Duration,
    service: &mut LockService,
    workers: &mut WorkerPool,
    register_url: &str,
) -> Vec<FaultWindow> {
    let start_us = now_us();
    let mut window = FaultWindow {
        fault,
        start_us,
        end_us: start_us,
        paused_pid: None,
        note: None,
    };
    let result: Result<(), String> = match fault {
        FaultKind::HolderPause => (|| {
            let pid = holder(workers, register_url)?;
            workers.signal(pid, "-STOP")?;
            window.paused_pid = Some(pid);
            window.start_us = now_us();
            std::thread::sleep(lease * 3);
            workers.signal(pid, "-CONT")
        })(),
        FaultKind::HolderKill => (|| {
            let pid = holder(workers, register_url)?;
            workers.signal(pid, "-KILL")?;
            window.start_us = now_us();
            workers
                .spawn()
                .map(drop)
                .map_err(|error| format!("starting a worker in its place: {error}"))
        })(),
        FaultKind::ServerRestart => {
            service.restart();
            Ok(())
        }
        FaultKind::ServerPause => {
            service.pause();
            std::thread::sleep(lease * 2);
            service.resume();
            Ok(())
        }
        FaultKind::PubsubKill => (|| {
            for _ in 0..5 {
                service.kill_wakeup_connections()?;
                std::thread::sleep(lease / 2);
            }
            Ok(())
        })(),
        FaultKind::SlowReplies | FaultKind::LostReplies => {
            std::thread::sleep(lease * 2);
            Ok(())
        }
        FaultKind::Failover | FaultKind::FailoverUnsynced => service.failover(lease * 2),
        FaultKind::Partition => service.partition(lease * 3),
        FaultKind::PartitionOneWay => service.partition_one_way(lease * 3),
        FaultKind::ClockJump => service.jump_clock(lease * 3).map(|()| {
            // The holds are gone at the jump; their holders learn it at their next renewal.
            std::thread::sleep(lease * 2);
        }),
        FaultKind::SlowNetwork => service.network().map(|network| {
            network.delay(lease / 4);
            std::thread::sleep(lease * 2);
            network.delay(Duration::ZERO);
        }),
        FaultKind::LateSteps => service.network().map(|network| {
            // Past the workers' response timeout, so each held request is given up (a release
            // retried) before it arrives.
            let period = (lease / 2).max(Duration::from_millis(200)) + Duration::from_millis(100);
            let until = std::time::Instant::now() + lease * 2;
            while std::time::Instant::now() < until {
                network.hold_back_next("");
                std::thread::sleep(period);
                network.deliver_held_in_reverse();
            }
            network.stop_holding_back();
            network.deliver_held();
        }),
        FaultKind::Mixed => {
            let mut windows = Vec::new();
            for part in MIXED {
                windows.extend(inject(part, lease, service, workers, register_url));
                std::thread::sleep(mixed_gap(lease));
            }
            return windows;
        }
    };
    window.end_us = now_us();
    if let Err(problem) = result {
        window.note = Some(problem);
    }
    // The next round fails over again: the new master gets a replica, after the window.
    service.ensure_replica();
    vec![window]
}

/// The worker that last read the register, if it is a live worker of this run; else any.
fn holder(workers: &WorkerPool, register_url: &str) -> Result<u32, String> {
    match register::last_reader(register_url)? {
        Some(pid) if workers.owns(pid) => Ok(pid),
        _ => workers
            .any()
            .ok_or_else(|| "no live worker to fault".to_owned()),
    }
}
