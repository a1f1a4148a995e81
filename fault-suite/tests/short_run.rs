//! The fault suite's short run, as CI runs it: every fault once, workers on the fenced lock, on
//! a semaphore and in an election, on Redis, PostgreSQL and etcd; and the partitions on each
//! topology of several servers.
//! The assertions are the columns that must be zero (stale tokens accepted, lost updates,
//! token regressions, hangs, panics) and that progress resumed after every fault; bad input
//! to the suite is a usage error.

use std::process::{Command, Output};

use serde_json::Value;

fn suite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlock-fault-suite"))
        .args(args)
        .output()
        .expect("run dlock-fault-suite")
}

#[test]
fn every_fault_leaves_the_fenced_register_consistent_and_nothing_hung() {
    short_run("redis");
}

#[test]
fn every_fault_leaves_the_fenced_register_consistent_and_nothing_hung_on_postgres() {
    short_run("postgres");
}

/// etcd's leases are whole seconds (and a member that comes back renews them), so its run
/// takes a lease of a second: the round's time for progress to resume scales with it.
#[test]
fn every_fault_leaves_the_fenced_register_consistent_and_nothing_hung_on_etcd() {
    short_run_with("etcd", &["--lease-ms", "1000"]);
}

/// PostgreSQL with a synchronous standby, each in a namespace of its own: the primary cut off
/// from the standby and the clients while the standby is promoted, and its WAL to the standby
/// dropped one way.
#[test]
fn partitions_on_a_postgres_standby_leave_the_fenced_register_consistent() {
    let rows = fenced_run(
        "postgres-standby",
        &[
            "--topology",
            "postgres-standby",
            "--faults",
            "partition,partition-one-way",
        ],
    );
    assert_eq!(rows, 2);
}

/// Redis Sentinel, a server and a sentinel on each of three nodes: the master's node cut off
/// from the other two until they promote a replica, and cut off one way.
#[test]
fn partitions_on_redis_sentinel_leave_the_fenced_register_consistent() {
    let rows = fenced_run(
        "sentinel",
        &[
            "--topology",
            "sentinel",
            "--faults",
            "partition,partition-one-way",
        ],
    );
    assert_eq!(rows, 2);
}

/// Redis Cluster, three masters with a replica each, every node in a namespace of its own: the
/// lock's master cut off from every other node until its replica is promoted, and cut off one
/// way.
#[test]
fn partitions_on_redis_cluster_leave_the_fenced_register_consistent() {
    let rows = fenced_run(
        "cluster",
        &[
            "--topology",
            "cluster",
            "--faults",
            "partition,partition-one-way",
        ],
    );
    assert_eq!(rows, 2);
}

/// RedLock over three servers, each in a namespace of its own: two of them (a majority) cut
/// off from the workers both ways, then one way. RedLock has no fenced lock: the workers check
/// `is_lost()` before writing.
#[test]
fn partitions_on_redlock_leave_no_two_holders() {
    let rows = quick_run(
        "redlock",
        "checked",
        &[
            "--topology",
            "redlock",
            "--faults",
            "partition,partition-one-way",
        ],
    );
    assert_eq!(rows, 2);
}

fn short_run(backend: &str) {
    short_run_with(backend, &[]);
}

fn short_run_with(backend: &str, extra: &[&str]) {
    let mut args = vec!["--backend", backend];
    args.extend_from_slice(extra);
    let rows = fenced_run(backend, &args);
    // Every fault; the partitions on etcd alone (its members in namespaces of their own), the
    // clock jump on Redis and PostgreSQL alone (etcd's leases are on a monotonic clock).
    let faults = if backend == "etcd" { 14 } else { 13 };
    assert_eq!(rows, faults, "every fault ran");
}

/// Runs the suite quick in fenced mode with `extra` arguments and checks every row; returns
/// how many rows there were.
fn fenced_run(label: &str, extra: &[&str]) -> usize {
    quick_run(label, "fenced", extra)
}

/// Runs the suite quick in `mode` (fenced, or checked where the backend has no fenced lock)
/// with `extra` arguments and checks every row: no stale write accepted and no token
/// regression (fenced), no overlap (checked), no lost update, hang or panic, progress after
/// every fault. Returns how many rows there were.
fn quick_run(label: &str, mode: &str, extra: &[&str]) -> usize {
    let json = std::env::temp_dir().join(format!(
        "dlock-fault-suite-{label}-{}.json",
        std::process::id()
    ));
    let mut args = vec![
        "--quick",
        "--modes",
        mode,
        "--json",
        json.to_str().expect("a UTF-8 temp path"),
    ];
    args.extend_from_slice(extra);
    let output = suite(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON results"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    let rows = rows.as_array().expect("one row per fault");
    for row in rows {
        let fault = row["fault"].as_str().unwrap_or("?");
        let number = |column: &str| {
            row[column]
                .as_u64()
                .unwrap_or_else(|| panic!("{fault}: no {column} in {row}"))
        };
        let mut columns = vec!["lost_updates", "hangs", "panics", "crashes"];
        match mode {
            "fenced" => columns.extend(["stale_accepted", "token_regressions"]),
            _ => columns.push("overlaps"),
        }
        for column in columns {
            assert_eq!(number(column), 0, "{fault}: {column}\n{stdout}");
        }
        assert!(
            number("done") > 0,
            "{fault}: no operation succeeded\n{stdout}"
        );
        assert!(
            row["recovery_ms"].is_u64(),
            "{fault}: progress never resumed\n{stdout}"
        );
        assert_eq!(
            row["notes"].as_array().map(Vec::len),
            Some(0),
            "{fault}: the fault did not go as planned\n{stdout}"
        );
    }
    rows.len()
}

#[test]
fn every_fault_leaves_no_more_believing_holders_than_permits() {
    believing_run("redis", "semaphore");
}

#[test]
fn every_fault_leaves_no_more_believing_holders_than_permits_on_postgres() {
    believing_run("postgres", "semaphore");
}

#[test]
fn every_fault_leaves_at_most_one_believing_leader() {
    believing_run("redis", "election");
}

/// Count-downs whose replies are lost or that arrive late, after the backend sent them again:
/// no latch opens after one of its two count-downs.
#[test]
fn lost_and_late_count_downs_open_no_latch_early() {
    believing_run_with("redis", "latch", "lost-replies,late-steps");
}

/// The semaphore or the election mode under the faults they must ride out: never more workers
/// that believe they hold a permit than there are permits, never two believing leaders.
fn believing_run(backend: &str, mode: &str) {
    believing_run_with(
        backend,
        mode,
        "holder-pause,holder-kill,server-pause,lost-replies",
    );
}

/// Runs `mode` quick under `faults`, and checks that no row has an overlap (or an opened-early
/// latch), a token regression, a hang or a panic, and that every row made progress.
fn believing_run_with(backend: &str, mode: &str, faults: &str) {
    let json = std::env::temp_dir().join(format!(
        "dlock-fault-suite-{mode}-{backend}-{}.json",
        std::process::id()
    ));
    let output = suite(&[
        "--backend",
        backend,
        "--quick",
        "--modes",
        mode,
        "--faults",
        faults,
        "--json",
        json.to_str().expect("a UTF-8 temp path"),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON results"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    let rows = rows.as_array().expect("one row per fault");
    assert_eq!(
        rows.len(),
        faults.split(',').count(),
        "every fault ran:\n{stdout}"
    );
    for row in rows {
        let fault = row["fault"].as_str().unwrap_or("?");
        let mut columns = vec!["overlaps", "hangs", "panics", "crashes"];
        if mode == "election" {
            // Leadership tokens increase as fencing tokens do.
            columns.push("token_regressions");
        }
        for column in columns {
            assert_eq!(row[column].as_u64(), Some(0), "{fault}: {column}\n{stdout}");
        }
        assert!(
            row["done"].as_u64().is_some_and(|done| done > 0),
            "{fault}: no operation succeeded\n{stdout}"
        );
    }
}

#[test]
fn bad_input_is_a_usage_error() {
    for (args, says) in [
        (&["--faults", "meteor"][..], "unknown fault \"meteor\""),
        (
            &["--processes", "0"][..],
            "--processes must be between 1 and 64",
        ),
        (
            &["--modes", "optimistic"][..],
            "unknown mode \"optimistic\"",
        ),
        (
            &["--lease-ms", "soon"][..],
            "--lease-ms must be a whole number",
        ),
        (&["--threads"][..], "--threads needs a value"),
        (&["--verbose"][..], "unknown argument \"--verbose\""),
        (
            &["--backend", "zookeeper"][..],
            "unknown backend \"zookeeper\"",
        ),
        (
            &["--register", "memcached"][..],
            "unknown register \"memcached\"",
        ),
        (
            &["--faults", "partition"][..],
            "the redis backend cannot take the partition fault",
        ),
        (
            &["--topology", "mesh"][..],
            "unknown topology \"mesh\" (single, sentinel, cluster, redlock, postgres-standby or etcd)",
        ),
        (
            &["--topology", "postgres-standby", "--backend", "redis"][..],
            "the postgres-standby topology runs the postgres backend, not redis",
        ),
        (
            &["--topology", "postgres-standby", "--faults", "late-steps"][..],
            "the postgres-standby topology cannot take the late-steps fault",
        ),
        (
            &["--backend", "etcd", "--faults", "clock-jump"][..],
            "the etcd backend cannot take the clock-jump fault",
        ),
        (
            &["--backend", "redlock", "--modes", "fenced"][..],
            "the redlock backend cannot run the fenced mode",
        ),
        (
            &["--backend", "redlock", "--faults", "failover"][..],
            "the redlock backend cannot take the failover fault (it has no replica",
        ),
        (
            &["--seeded-bug", "typo"][..],
            "unknown seeded bug \"typo\" (skip-replica-ack, renew-without-owner-check, \
             client-clock)",
        ),
    ] {
        let output = suite(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stderr.contains("usage:"), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing ran");
    }
}

#[test]
fn help_names_every_backend() {
    let output = suite(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let line = help
        .lines()
        .find(|line| line.trim_start().starts_with("--backend"))
        .unwrap_or_else(|| panic!("no --backend line in:\n{help}"));
    for backend in ["redis", "postgres", "etcd"] {
        assert!(line.contains(backend), "{backend} missing: {line}");
    }
}
