//! Section 10: the same steps on a Redis Cluster of three masters started for it, as ratios to
//! the round trip to the master that serves the measured lock.

use std::time::Duration;

use dlock::LockClient;

use crate::handoff::{self, Plan};
use crate::redis_scenarios;
use crate::report::Report;
use crate::stats::us;
use crate::support::cluster::ClusterSetup;

pub fn section(report: &mut Report, samples: usize, secs: &dyn Fn(f64) -> Duration) {
    let setup = ClusterSetup::start(3, 0);
    let name = "bench:cluster:{handoff}";
    let master = setup.master_of_slot(setup.slot_of(name));
    let (ping, evalsha) = redis_scenarios::round_trips(&setup.nodes[master].url(), samples);
    let rtt = ping.p50_us;
    let in_rtt = |value: f64| format!("{:.1} ×", value / rtt);
    // On a cluster node a script's round trip costs more than PING's: both are shown.
    let script_rtt = evalsha.p50_us;
    let in_script = |value: f64| format!("{:.1} ×", value / script_rtt);
    let client = LockClient::new(setup.backend());
    report.heading(
        "10. Redis Cluster (3 masters, no replicas; ratios to PING of the lock's master)",
        &["step", "p50", "× PING", "× EVALSHA", "p99"],
    );
    report.row(&[
        "PING".into(),
        us(rtt),
        in_rtt(rtt),
        in_script(rtt),
        us(ping.p99_us),
    ]);
    report.row(&[
        "EVALSHA `return 1`".into(),
        us(evalsha.p50_us),
        in_rtt(evalsha.p50_us),
        in_script(evalsha.p50_us),
        us(evalsha.p99_us),
    ]);
    let (watchdog, leased) = redis_scenarios::uncontended_pair(&client, samples);
    report.row(&[
        "uncontended lock + unlock (watchdog)".into(),
        us(watchdog.p50_us),
        in_rtt(watchdog.p50_us),
        in_script(watchdog.p50_us),
        us(watchdog.p99_us),
    ]);
    report.row(&[
        "uncontended lock + unlock (fixed lease)".into(),
        us(leased.p50_us),
        in_rtt(leased.p50_us),
        in_script(leased.p50_us),
        us(leased.p99_us),
    ]);
    for workers in [2, 8] {
        let plan = Plan {
            workers,
            run_for: secs(2.0),
            hold: Duration::from_millis(1),
            forced: true,
            kind: handoff::Kind::Plain,
        };
        let outcome = handoff::run_threads(&client, name, plan);
        report.row(&[
            format!("forced hand-off, {workers} threads, 1 ms hold (release → next holder)"),
            us(outcome.latency.p50_us),
            in_rtt(outcome.latency.p50_us),
            in_script(outcome.latency.p50_us),
            us(outcome.latency.p99_us),
        ]);
    }
}
