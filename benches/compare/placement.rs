//! The round trip and the pair with the client thread and the server pinned to one CPU, then
//! to two: on a VM a wake-up across CPUs costs tens of µs, so where the scheduler happens to
//! put the two processes moves `PING` by up to 10 × within minutes. Measured in alternating
//! blocks, each block's ratio taken on its own, so that a figure and the round trip it is
//! divided by always saw the same placement and the same moment.

use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use dlocks::LockClient;

use crate::redis_scenarios::plain_connection;
use crate::report::Report;
use crate::stats::{interleaved, us, Ratio};

/// Microseconds over the blocks: the median block, and the lowest and highest.
fn spread_us(values: Vec<f64>) -> String {
    let spread = Ratio::of(values);
    format!(
        "{} ({}–{})",
        us(spread.median),
        us(spread.low),
        us(spread.high)
    )
}

/// Section 2b: `PING` and dlock's pair sampled alternately in `blocks` blocks of `per_block`
/// each, with this thread and the server (`server_pid`) on one CPU, then on two.
pub fn section(
    report: &mut Report,
    client: &LockClient,
    url: &str,
    server_pid: Option<u32>,
    blocks: usize,
    per_block: usize,
) {
    report.heading(
        "2b. The pair against the round trip, by CPU placement: median of per-block figures \
         (lowest–highest block)",
        &[
            "client thread / server",
            "PING p50",
            "pair p50",
            "pair / (2 × PING)",
            "pair − 2 × PING",
        ],
    );
    let Some(server) = server_pid.and_then(|pid| Pid::from_raw(pid as i32)) else {
        report.note("(skipped: the server's pid is unknown)");
        return;
    };
    let (Ok(own), Ok(servers)) = (sched_getaffinity(None), sched_getaffinity(Some(server))) else {
        report.note("(skipped: CPU affinity cannot be read here)");
        return;
    };
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&cpu| own.is_set(cpu))
        .collect();
    let mut placements = vec![("one CPU", cpus[0], cpus[0])];
    if let Some(&other) = cpus.get(1) {
        placements.push(("two CPUs", cpus[0], other));
    }
    let lock = client.lock(format!("bench:placement:{}", uuid::Uuid::new_v4()));
    let mut con = plain_connection(url);
    for (label, client_cpu, server_cpu) in placements {
        let pinned = sched_setaffinity(None, &only(client_cpu)).is_ok()
            && sched_setaffinity(Some(server), &only(server_cpu)).is_ok();
        if !pinned {
            report.note(&format!(
                "({label}: skipped, the CPU affinity cannot be set here)"
            ));
            continue;
        }
        let (mut pings, mut pairs, mut ratios, mut fixed) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..blocks {
            let mut ping = || {
                let _: String = redis::cmd("PING").query(&mut con).expect("PING");
            };
            let mut pair = || lock.lock().expect("lock").unlock().expect("unlock");
            let found = interleaved(per_block / 10, per_block, &mut [&mut ping, &mut pair]);
            let (ping, pair) = (found.summary(0).p50_us, found.summary(1).p50_us);
            pings.push(ping);
            pairs.push(pair);
            ratios.push(pair / (2.0 * ping));
            fixed.push(pair - 2.0 * ping);
        }
        report.row(&[
            format!("{label} (CPU {client_cpu} / CPU {server_cpu})"),
            spread_us(pings),
            spread_us(pairs),
            Ratio::of(ratios).to_string(),
            spread_us(fixed),
        ]);
    }
    let _ = sched_setaffinity(None, &own);
    let _ = sched_setaffinity(Some(server), &servers);
}

/// A set of one CPU.
fn only(cpu: usize) -> CpuSet {
    let mut set = CpuSet::new();
    set.set(cpu);
    set
}

/// The calling thread pinned to the first CPU this process may use, and the server (when
/// given) to the second, until dropped: comparisons of dlock with peers that run as processes
/// of their own (started meanwhile from this thread, they inherit its CPU) then see one
/// placement, not whichever the scheduler picked for each.
pub struct Pinned {
    own: CpuSet,
    server: Option<(Pid, CpuSet)>,
}

impl Pinned {
    /// `None` when the affinity cannot be read or set here (then nothing was changed).
    pub fn apart(server_pid: Option<u32>) -> Option<Pinned> {
        let own = sched_getaffinity(None).ok()?;
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
            .filter(|&cpu| own.is_set(cpu))
            .collect();
        let (&client_cpu, &server_cpu) = (cpus.first()?, cpus.get(1)?);
        let server = match server_pid.and_then(|pid| Pid::from_raw(pid as i32)) {
            Some(pid) => {
                let before = sched_getaffinity(Some(pid)).ok()?;
                sched_setaffinity(Some(pid), &only(server_cpu)).ok()?;
                Some((pid, before))
            }
            None => None,
        };
        let pinned = Pinned { own, server };
        sched_setaffinity(None, &only(client_cpu)).ok()?;
        Some(pinned)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = sched_setaffinity(None, &self.own);
        if let Some((pid, before)) = &self.server {
            let _ = sched_setaffinity(Some(*pid), before);
        }
    }
}
