//! Section 10: the same steps on a Redis Cluster of three masters started for it, as ratios to
//! the round trip to the master that serves the measured lock.

use std::time::Duration;

use dlocks::{LockClient, MultiLock};

use crate::handoff::{self, Plan};
use crate::redis_scenarios;
use crate::report::Report;
use crate::stats::{interleaved, us};
use crate::support::cluster::ClusterSetup;

pub fn section(report: &mut Report, samples: usize, secs: &dyn Fn(f64) -> Duration) {
    let setup = ClusterSetup::start(3, 0);
    let name = "bench:cluster:{handoff}";
    let master = setup.master_of_slot(setup.slot_of(name));
    let client = LockClient::new(setup.backend());
    // One name per master: a multi-lock over them sends each step to the three masters.
    let per_master = setup.name_on_each_master("bench:cluster:spread:");
    let spread = MultiLock::new(per_master.iter().map(|name| client.lock(name)));
    let lock = client.lock("bench:cluster:{handoff}:pair");
    let mut con = redis_scenarios::plain_connection(&setup.nodes[master].url());
    let script = redis::Script::new(redis_scenarios::TRIVIAL_SCRIPT);
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut script_con = redis_scenarios::plain_connection(&setup.nodes[master].url());
    let mut evalsha = || {
        let _: i64 = script.invoke(&mut script_con).expect("EVALSHA");
    };
    let mut watchdog_pair = || lock.lock().expect("lock").unlock().expect("unlock");
    let mut leased_pair = || {
        lock.lock_with_lease(Duration::from_secs(10))
            .expect("lock")
            .unlock()
            .expect("unlock")
    };
    let mut spread_pair = || spread.lock().expect("lock").unlock().expect("unlock");
    // Each member alone: the multi-lock's floor is the slowest master's pair, which depends on
    // where the scheduler put each master.
    let members: Vec<dlocks::Lock> = per_master.iter().map(|name| client.lock(name)).collect();
    let mut member_pairs: Vec<Box<dyn FnMut() + '_>> = members
        .iter()
        .map(|member| {
            Box::new(|| member.lock().expect("lock").unlock().expect("unlock"))
                as Box<dyn FnMut() + '_>
        })
        .collect();
    let mut ops: Vec<&mut dyn FnMut()> = vec![
        &mut ping,
        &mut evalsha,
        &mut watchdog_pair,
        &mut leased_pair,
        &mut spread_pair,
    ];
    for pair in member_pairs.iter_mut() {
        ops.push(pair.as_mut());
    }
    let sampled = interleaved(200, samples / 2, &mut ops);
    drop(ops);
    let rtt = sampled.summary(0).p50_us;
    report.heading(
        "10. Redis Cluster (3 masters, no replicas): steps sampled alternately with PING and a \
         trivial EVALSHA on the lock's master; ratios are medians of 10 blocks (low–high)",
        &[
            "step",
            "p50",
            "p99",
            "/ PING",
            "/ EVALSHA",
            "/ lock + unlock (multi-lock: / its slowest member's)",
        ],
    );
    for (op, label) in [
        "PING",
        "EVALSHA `return 1`",
        "uncontended lock + unlock (watchdog)",
        "uncontended lock + unlock (fixed lease)",
        "multi-lock of 3 names on the 3 masters, lock + unlock",
    ]
    .into_iter()
    .enumerate()
    {
        let summary = sampled.summary(op);
        report.row(&[
            label.into(),
            us(summary.p50_us),
            us(summary.p99_us),
            sampled.ratio(op, 0).to_string(),
            sampled.ratio(op, 1).to_string(),
            match op {
                3 => sampled.ratio(op, 2).to_string(),
                4 => sampled
                    .ratio_to_slowest(op, 5..5 + members.len())
                    .to_string(),
                _ => "-".into(),
            },
        ]);
    }
    // The hand-offs run for seconds each: their ratios are to the round trips sampled above.
    let script_rtt = sampled.summary(1).p50_us;
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
            us(outcome.latency.p99_us),
            format!("{:.2}", outcome.latency.p50_us / rtt),
            format!("{:.2}", outcome.latency.p50_us / script_rtt),
            "-".into(),
        ]);
    }
}
