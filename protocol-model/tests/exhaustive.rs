//! The protocol explored exhaustively within each run's bounds: every rule holds after every
//! step of every sequence. Each run prints the worlds it visited. `DLOCK_MODEL_DEPTH=N` explores
//! every run to depth `N` instead of its own, `DLOCK_MODEL_FAULTS=N` with `N` faults per
//! sequence.

use dlock_protocol_model::{explore, runs, Config};

fn every_rule_holds_within(mut config: Config) {
    if let Some(depth) = std::env::var("DLOCK_MODEL_DEPTH")
        .ok()
        .and_then(|depth| depth.parse().ok())
    {
        config.depth = depth;
    }
    if let Some(faults) = std::env::var("DLOCK_MODEL_FAULTS")
        .ok()
        .and_then(|faults| faults.parse().ok())
    {
        config.faults.max = faults;
    }
    let started = std::time::Instant::now();
    let report = explore(&config);
    println!(
        "{}: {} threads, {} names, depth {}, {} faults: {} distinct worlds expanded, {} steps checked, {:?}",
        report.title,
        config.threads.len(),
        config.names.len(),
        report.depth,
        config.faults.max,
        report.states,
        report.transitions,
        started.elapsed()
    );
    assert!(report.transitions > 0, "{}: nothing explored", report.title);
    if let Some(counterexample) = report.counterexample {
        panic!("{}: {counterexample}", report.title);
    }
}

#[test]
fn reentrant_and_fenced_locks() {
    every_rule_holds_within(runs::reentrant_and_fenced());
}

#[test]
fn a_name_used_as_a_lock_and_a_read_write_lock() {
    every_rule_holds_within(runs::lock_and_read_write());
}

#[test]
fn fair_locks() {
    every_rule_holds_within(runs::fair());
}

#[test]
fn fair_locks_with_grants_proven_by_their_secret() {
    every_rule_holds_within(runs::fair_proven());
}

#[test]
fn read_write_locks() {
    every_rule_holds_within(runs::read_write());
}

#[test]
fn semaphores_and_latches() {
    every_rule_holds_within(runs::semaphores_and_latches());
}

#[test]
fn leader_elections() {
    every_rule_holds_within(runs::elections());
}

#[test]
fn etcd_sessions_resolved_attempts_lapsing_records_and_limits() {
    every_rule_holds_within(runs::etcd());
}

#[test]
fn etcd_fair_turns_believed_from_the_watch() {
    every_rule_holds_within(runs::etcd_turns());
}
