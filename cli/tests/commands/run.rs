//! `dlock run` as a shell script uses it: real `dlock` processes, real commands, a real
//! `redis-server`.

use crate::support;

use std::time::{Duration, Instant};

use dlocks::LockClient;
use support::redis_server::RedisServer;
use support::redisson::Redisson;
use support::tcp_proxy::TcpProxy;
use support::{code, dlock, read_pid, run, running, stderr, stdout, wait_until, Scratch};

#[test]
fn two_runs_over_a_shared_counter_file_lose_no_update() {
    let server = RedisServer::start();
    let scratch = Scratch::new("counter");
    let counter = scratch.path("counter");
    std::fs::write(&counter, "0").expect("the counter file");
    // Read, pause, write: without the lock, two of these lose increments.
    let increment = format!(
        "n=$(cat {0}); sleep 0.02; echo $((n + 1)) > {0}",
        counter.display()
    );
    let runs_per_loop = 10;
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..runs_per_loop {
                    let output = run(&server, &["run", "counter", "--", "sh", "-c", &increment]);
                    assert_eq!(code(&output), 0, "{}", stderr(&output));
                }
            });
        }
    });
    let total = std::fs::read_to_string(&counter).expect("the counter file");
    assert_eq!(total.trim(), (2 * runs_per_loop).to_string());
}

#[test]
fn the_commands_exit_code_is_passed_through() {
    let server = RedisServer::start();
    assert_eq!(code(&run(&server, &["run", "codes", "--", "true"])), 0);
    assert_eq!(
        code(&run(&server, &["run", "codes", "--", "sh", "-c", "exit 7"])),
        7
    );
    // A command ended by a signal: 128 + its number, as shells report it.
    let killed = run(&server, &["run", "codes", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&killed), 128 + 9);
    // The lock was released every time, whatever the end.
    let client = LockClient::new(server.backend());
    assert!(client.lock("codes").try_lock().expect("try_lock").is_some());
}

#[test]
fn the_command_sees_the_lock_name_and_a_fenced_holds_token() {
    let server = RedisServer::start();
    let first = run(
        &server,
        &[
            "run",
            "--fenced",
            "ledger",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_LOCK_NAME $DLOCK_FENCING_TOKEN",
        ],
    );
    let second = run(
        &server,
        &[
            "run",
            "--fenced",
            "ledger",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_LOCK_NAME $DLOCK_FENCING_TOKEN",
        ],
    );
    let token = |output: &std::process::Output| -> u64 {
        let text = stdout(output);
        let (name, token) = text.trim().split_once(' ').expect("name and token");
        assert_eq!(name, "ledger");
        token.parse().expect("a numeric token")
    };
    assert!(token(&second) > token(&first));
    let plain = run(
        &server,
        &[
            "run",
            "plain",
            "--",
            "sh",
            "-c",
            "echo ${DLOCK_FENCING_TOKEN:-none}",
        ],
    );
    assert_eq!(stdout(&plain).trim(), "none");
}

#[test]
fn wait_times_out_with_75_without_running_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new("wait");
    let marker = scratch.path("ran");
    let client = LockClient::new(server.backend());
    let held = client.lock("busy").lock().expect("lock");
    let started = Instant::now();
    let output = run(
        &server,
        &[
            "run",
            "busy",
            "--wait",
            "300ms",
            "--",
            "touch",
            &marker.display().to_string(),
        ],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(stderr(&output).contains("not acquired within 300ms"));
    assert!(
        !marker.exists(),
        "the command must not run without the lock"
    );
    // `--wait 0` tries once.
    assert_eq!(
        code(&run(&server, &["run", "busy", "--wait", "0", "--", "true"])),
        75
    );
    drop(held);
    assert_eq!(
        code(&run(&server, &["run", "busy", "--wait", "0", "--", "true"])),
        0
    );
}

#[test]
fn a_lost_lease_stops_the_command_with_sigterm_and_exits_69() {
    let server = RedisServer::start();
    let scratch = Scratch::new("lost");
    let ready = scratch.path("ready");
    let stopped = scratch.path("stopped");
    let script = format!(
        "trap 'echo yes > {stopped}; exit 0' TERM; echo $$ > {ready}; while true; do sleep 0.05; done",
        stopped = stopped.display(),
        ready = ready.display()
    );
    let child = dlock(&server)
        .args(["run", "lost", "--lease", "1s", "--", "sh", "-c", &script])
        .spawn()
        .expect("dlock starts");
    read_pid(&ready);
    let unlocked = run(&server, &["force-unlock", "lost"]);
    assert_eq!(code(&unlocked), 0, "{}", stderr(&unlocked));
    let output = child.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("lost lock \"lost\""),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&stopped)
            .expect("SIGTERM reached the command")
            .trim(),
        "yes"
    );
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_kill_after() {
    let server = RedisServer::start();
    let scratch = Scratch::new("stubborn");
    let ready = scratch.path("ready");
    // An ignored signal stays ignored across exec: `sleep` ignores SIGTERM.
    let script = format!("trap '' TERM; echo $$ > {}; exec sleep 30", ready.display());
    let child = dlock(&server)
        .args([
            "run",
            "stubborn",
            "--lease",
            "1s",
            "--kill-after",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .expect("dlock starts");
    read_pid(&ready);
    let started = Instant::now();
    assert_eq!(code(&run(&server, &["force-unlock", "stubborn"])), 0);
    let output = child.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("sending SIGKILL"),
        "{}",
        stderr(&output)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "killed long before `sleep 30` ends: ended after {:?}; {}",
        started.elapsed(),
        stderr(&output)
    );
}

#[test]
fn a_redisson_holder_blocks_dlock_run_until_it_unlocks() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    assert_eq!(
        redisson.try_lock("shared:deploy", Duration::from_secs(30)),
        None
    );
    let output = run(
        &server,
        &["run", "shared:deploy", "--wait", "300ms", "--", "true"],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    let waiting = dlock(&server)
        .args(["run", "shared:deploy", "--wait", "20s", "--", "echo", "ran"])
        .spawn()
        .expect("dlock starts");
    server.await_subscriber("redisson_lock__channel:{shared:deploy}");
    assert_eq!(redisson.unlock("shared:deploy"), Some(1));
    let output = waiting.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "ran");
}

#[test]
fn readers_share_and_writers_exclude() {
    let server = RedisServer::start();
    let scratch = Scratch::new("rw");
    let hold = |ready: &std::path::Path, kind: &str| {
        let script = format!("echo $$ > {}; sleep 1", ready.display());
        dlock(&server)
            .args(["run", kind, "config", "--", "sh", "-c", &script])
            .spawn()
            .expect("dlock starts")
    };
    let first = hold(&scratch.path("r1"), "--read");
    let second = hold(&scratch.path("r2"), "--read");
    read_pid(&scratch.path("r1"));
    read_pid(&scratch.path("r2"));
    let status = stdout(&run(&server, &["status", "config", "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["held_as"], "read");
    assert_eq!(status["holders"].as_array().map(Vec::len), Some(2));
    let writer = run(
        &server,
        &["run", "--write", "config", "--wait", "100ms", "--", "true"],
    );
    assert_eq!(code(&writer), 75);
    for reader in [first, second] {
        assert_eq!(code(&reader.wait_with_output().expect("ends")), 0);
    }
    let writer = run(
        &server,
        &["run", "--write", "config", "--wait", "0", "--", "true"],
    );
    assert_eq!(code(&writer), 0, "{}", stderr(&writer));
}

#[test]
fn fair_runs_are_granted_in_arrival_order() {
    let server = RedisServer::start();
    let scratch = Scratch::new("fair");
    let log = scratch.path("log");
    let client = LockClient::new(server.backend());
    let held = client.fair_lock("queue").lock().expect("lock");
    let mut waiting = Vec::new();
    for index in 0..3 {
        let script = format!("echo {index} >> {}", log.display());
        waiting.push(
            dlock(&server)
                .args(["run", "--fair", "queue", "--", "sh", "-c", &script])
                .spawn()
                .expect("dlock starts"),
        );
        // Queued on the server before the next one arrives.
        wait_until("the waiter is queued", Duration::from_secs(10), || {
            let status = stdout(&run(&server, &["status", "queue", "--json"]));
            serde_json::from_str::<serde_json::Value>(&status)
                .is_ok_and(|status| status["queued_waiters"] == index + 1)
        });
    }
    drop(held);
    for child in waiting {
        let output = child.wait_with_output().expect("ends");
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    assert_eq!(std::fs::read_to_string(&log).expect("log"), "0\n1\n2\n");
}

#[test]
fn run_reaches_a_master_behind_redis_sentinel() {
    let setup = support::sentinel::SentinelSetup::start();
    let hosts: Vec<String> = setup
        .urls()
        .iter()
        .map(|url| url.trim_start_matches("redis://").to_owned())
        .collect();
    let url = format!(
        "redis-sentinel://{}/{}",
        hosts.join(","),
        support::sentinel::MASTER_NAME
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env("REDIS_URL", &url)
        .args([
            "run",
            "via-sentinel",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_LOCK_NAME",
        ])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "via-sentinel");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env("REDIS_URL", "redis-sentinel://127.0.0.1:1")
        .args(["status", "x"])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
}

#[test]
fn renewals_that_keep_failing_stop_the_command_while_the_lease_still_runs() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let scratch = Scratch::new("at-risk");
    let ready = scratch.path("ready");
    let termed = scratch.path("termed");
    // The command notes SIGTERM and keeps running: only SIGKILL ends it.
    let script = format!(
        "trap 'echo TERM > {termed}' TERM; echo $$ > {ready}; while true; do sleep 0.05; done",
        termed = termed.display(),
        ready = ready.display()
    );
    let child = dlock(&server)
        .env("REDIS_URL", proxy.url())
        .args([
            "run",
            "at-risk",
            "--lease",
            "9s",
            "--kill-after",
            "2s",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .expect("dlock starts");
    let command = read_pid(&ready);
    // The server stays up, but dlock can no longer reach it: its renewals fail.
    proxy.hold_traffic(true);
    wait_until("the command got SIGTERM", Duration::from_secs(20), || {
        termed.exists()
    });
    let termed_at = Instant::now();
    // SIGTERM came while the lease still ran on the server, about --kill-after before its end
    // (the old behaviour waited for the lease to be lost).
    let left: i64 = redis::cmd("PTTL")
        .arg("at-risk")
        .query(&mut server.admin())
        .expect("PTTL");
    assert!(
        left > 1000,
        "SIGTERM came with {left} ms of the lease left on the server"
    );
    // SIGKILL just before the lease runs out, not --kill-after after the loss.
    wait_until("the command was killed", Duration::from_secs(10), || {
        !running(command)
    });
    let killed_after = termed_at.elapsed();
    let bound = Duration::from_millis(left as u64) + Duration::from_secs(1);
    assert!(
        killed_after <= bound,
        "killed {killed_after:?} after SIGTERM, the lease had {left} ms left then"
    );
    proxy.hold_traffic(false);
    let output = child.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    let messages = stderr(&output);
    assert!(
        messages.contains("is not working") && messages.contains("sending SIGKILL"),
        "{messages}"
    );
}

#[test]
fn a_kill_after_the_lease_cannot_fit_is_warned_about_at_start() {
    let server = RedisServer::start();
    let output = run(
        &server,
        &[
            "run",
            "short",
            "--lease",
            "3s",
            "--kill-after",
            "10s",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("warning: --kill-after 10.0s does not fit in --lease 3.0s"),
        "{}",
        stderr(&output)
    );
    // The defaults fit: no warning; nor with a short lease alone, to which the default
    // --kill-after shrinks.
    for args in [
        &["run", "short", "--", "true"][..],
        &["run", "short", "--lease", "3s", "--", "true"],
    ] {
        let quiet = run(&server, args);
        assert_eq!(code(&quiet), 0);
        assert!(!stderr(&quiet).contains("warning"), "{}", stderr(&quiet));
    }
}

#[test]
fn a_name_held_as_another_kind_exits_65_and_says_which() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let read = client
        .read_write_lock("config")
        .read_lock()
        .lock()
        .expect("read lock");
    let output = run(&server, &["run", "config", "--wait", "0", "--", "true"]);
    assert_eq!(code(&output), 65, "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("read-write lock") && message.contains("--read"),
        "{message}"
    );
    drop(read);
    // A key that is no lock at all.
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("x")
        .query(&mut server.admin())
        .expect("SET");
    // Lock names are the store's keys: one holding other data (a string, or a number that
    // could be a Redisson semaphore's count) is refused, and the message says so.
    let _: () = redis::cmd("SET")
        .arg("visits")
        .arg("17")
        .query(&mut server.admin())
        .expect("SET");
    for name in ["plain", "visits"] {
        let output = run(&server, &["run", name, "--", "true"]);
        assert_eq!(code(&output), 65, "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("other data") && message.contains("lock names are the store's keys"),
            "{message}"
        );
    }
}

#[test]
fn usage_errors_name_the_flag_and_show_redis_as_optional() {
    let server = RedisServer::start();
    let output = run(&server, &["run", "x", "--lease", "0", "--", "true"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("--lease") && !message.contains("watchdog_lease"),
        "{message}"
    );
    // REDIS_URL is set (by the harness, as users set it): the usage line still shows
    // `--redis` as the option it is, not as a required argument.
    let output = run(&server, &["run"]);
    assert_eq!(code(&output), 2);
    let usage = stderr(&output);
    assert!(usage.contains("Usage: dlock run"), "{usage}");
    assert!(!usage.contains("--redis"), "{usage}");
    let help = stdout(&run(&server, &["--help"]));
    assert!(help.contains("Usage: dlock [OPTIONS] <COMMAND>"), "{help}");
    assert!(help.contains("65"), "the exit codes are listed: {help}");
    assert!(help.contains("etcd://"), "every backend's URL: {help}");
}

#[test]
fn permits_let_at_most_n_commands_run_at_once() {
    let server = RedisServer::start();
    let scratch = Scratch::new("permits");
    let hold = |ready: &std::path::Path| {
        let script = format!("echo \"$DLOCK_PERMIT_ID\" > {}; sleep 2", ready.display());
        dlock(&server)
            .args([
                "run",
                "--permits",
                "2",
                "api-quota",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .spawn()
            .expect("dlock starts")
    };
    let first = hold(&scratch.path("p1"));
    let second = hold(&scratch.path("p2"));
    for ready in ["p1", "p2"] {
        let path = scratch.path(ready);
        wait_until(
            "the command holds a permit",
            Duration::from_secs(10),
            || std::fs::read_to_string(&path).is_ok_and(|id| id.trim().len() == 32),
        );
    }
    let client = LockClient::new(server.backend());
    assert_eq!(
        client
            .semaphore("api-quota")
            .available_permits()
            .expect("available"),
        0
    );
    let third = run(
        &server,
        &[
            "run",
            "--permits",
            "2",
            "api-quota",
            "--wait",
            "100ms",
            "--",
            "true",
        ],
    );
    assert_eq!(
        code(&third),
        75,
        "both permits are held: {}",
        stderr(&third)
    );
    for holder in [first, second] {
        assert_eq!(code(&holder.wait_with_output().expect("ends")), 0);
    }
    assert_eq!(
        client
            .semaphore("api-quota")
            .available_permits()
            .expect("available"),
        2,
        "both given back"
    );
    let output = run(
        &server,
        &[
            "run",
            "--permits",
            "2",
            "api-quota",
            "--wait",
            "0",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let bad = run(&server, &["run", "--permits", "0", "x", "--", "true"]);
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
}
