//! `dlock run` owns its whole job: every process the command starts is signalled, waited for,
//! and killed with `dlock`, so that a second `dlock run` on the same name never runs while a
//! process of the first job lives.

use crate::support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use dlocks::LockClient;
use support::redis_server::RedisServer;
use support::{code, dlock, read_pid, running, send_signal, stderr, wait_until, Scratch};

/// A job whose first process writes its pid (its process group's id) to `pgid`, and which
/// starts a shell that sleeps 4 s and then creates `created`.
fn script(pgid: &Path, created: &Path) -> String {
    format!(
        "echo $$ > {}; sh -c 'sleep 4; touch {}' & wait",
        pgid.display(),
        created.display()
    )
}

/// A command that creates `overlap` if any process of process group `pgid` (read from its
/// file) lives (zombies are dead), and `ran` in any case.
fn check_no_overlap(pgid: &Path, overlap: &Path, ran: &Path) -> String {
    format!(
        "g=$(cat {pgid}); for f in /proc/[0-9]*/stat; do \
           set -- $(sed 's/.*) //' \"$f\" 2>/dev/null); \
           if [ \"$3\" = \"$g\" ] && [ \"$1\" != Z ]; then echo \"$f\" >> {overlap}; fi; \
         done; touch {ran}",
        pgid = pgid.display(),
        overlap = overlap.display(),
        ran = ran.display()
    )
}

/// Starts `dlock run` on `name` with `args` before `--`, and `script` as its command.
fn start(server: &RedisServer, name: &str, args: &[&str], script: &str) -> Child {
    dlock(server)
        .arg("run")
        .arg(name)
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .spawn()
        .expect("dlock starts")
}

/// Waits until the second run's command ran, and checks it saw no process of the first job,
/// and that the first job's file was never created.
fn assert_no_overlap(second: Child, scratch: &Scratch, started: Instant) {
    let output = second.wait_with_output().expect("the second dlock ends");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(scratch.path("ran").exists(), "the second command ran");
    assert!(
        !scratch.path("overlap").exists(),
        "the second command ran while the first job lived: {:?}",
        std::fs::read_to_string(scratch.path("overlap"))
    );
    // The first job would have created it 4 s after it started.
    let after = Duration::from_secs(5).saturating_sub(started.elapsed());
    std::thread::sleep(after);
    assert!(
        !scratch.path("created").exists(),
        "a process of the first job outlived it"
    );
}

#[test]
fn a_dlock_killed_with_sigkill_takes_its_whole_job_with_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-kill9");
    let (pgid, created) = (scratch.path("pgid"), scratch.path("created"));
    let started = Instant::now();
    let mut first = start(
        &server,
        "nightly",
        &["--lease", "2s"],
        &script(&pgid, &created),
    );
    let group = read_pid(&pgid);
    std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    first.kill().expect("kill -9 dlock");
    first.wait().expect("reaped");
    let killed = Instant::now();
    wait_until(
        "the first job's processes are gone",
        Duration::from_secs(1),
        || !running(group),
    );
    // The lock itself frees when its 2 s lease runs out (nobody released it).
    let client = LockClient::new(server.backend());
    assert!(
        client
            .lock("nightly")
            .try_lock()
            .expect("try_lock")
            .is_none(),
        "still held right after the kill"
    );
    let check = check_no_overlap(&pgid, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_no_overlap(second, &scratch, started);
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "freed by its 2 s lease, long before the 30 s default would free it"
    );
}

#[test]
fn a_job_is_stopped_before_its_lease_runs_out_while_the_server_is_paused() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-paused");
    let (pgid, created) = (scratch.path("pgid"), scratch.path("created"));
    let started = Instant::now();
    let first = start(
        &server,
        "nightly",
        &["--lease", "2s"],
        &script(&pgid, &created),
    );
    read_pid(&pgid);
    std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    server.pause();
    // The renewals get no answer: the job is stopped before the lease can run out, and
    // `dlock` (its release unanswered too) exits with 69.
    let output = first.wait_with_output().expect("the first dlock ends");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    server.resume();
    let check = check_no_overlap(&pgid, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_no_overlap(second, &scratch, started);
    let messages = stderr(&output);
    assert!(
        messages.contains("is not working") && messages.contains("SIGTERM"),
        "{messages}"
    );
}

#[test]
fn the_lock_is_kept_until_every_process_of_the_job_has_ended() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-background");
    let pgid = scratch.path("pgid");
    // The command exits at once and leaves a process behind in its group.
    let leaves = format!(
        "echo $$ > {}; sh -c 'sleep 1.5' > /dev/null 2>&1 & exit 0",
        pgid.display()
    );
    let started = Instant::now();
    let first = start(&server, "report", &[], &leaves);
    read_pid(&pgid);
    let check = check_no_overlap(&pgid, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "report", &["--wait", "20s"], &check);
    let output = first.wait_with_output().expect("the first dlock ends");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "dlock waited for the process left behind"
    );
    assert_no_overlap(second, &scratch, started);
}

#[test]
fn a_signal_sent_to_dlock_reaches_every_process_of_the_job() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-signal");
    let (ready, got) = (scratch.path("ready"), scratch.path("got"));
    // The first shell goes on after SIGTERM; the one it starts notes it and stops.
    let script = format!(
        "trap true TERM; sh -c 'trap \"echo TERM > {got}; exit 0\" TERM; echo $$ > {ready}; \
         while true; do sleep 0.05; done' & wait; wait",
        got = got.display(),
        ready = ready.display()
    );
    let child = start(&server, "graceful", &[], &script);
    read_pid(&ready);
    send_signal(child.id(), "TERM");
    let output = child.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&got)
            .expect("SIGTERM reached the inner shell")
            .trim(),
        "TERM"
    );
    let client = LockClient::new(server.backend());
    assert!(client
        .lock("graceful")
        .try_lock()
        .expect("try_lock")
        .is_some());
}

#[test]
fn sigterm_is_passed_to_the_command_and_the_lock_released_after_it_exits() {
    let server = RedisServer::start();
    let scratch = Scratch::new("sigterm");
    let ready = scratch.path("ready");
    let got = scratch.path("got");
    let script = format!(
        "trap 'echo TERM > {got}; exit 42' TERM; echo $$ > {ready}; while true; do sleep 0.05; done",
        got = got.display(),
        ready = ready.display()
    );
    let child = dlock(&server)
        .args(["run", "graceful", "--", "sh", "-c", &script])
        .spawn()
        .expect("dlock starts");
    read_pid(&ready);
    send_signal(child.id(), "TERM");
    let output = child.wait_with_output().expect("dlock ends");
    assert_eq!(code(&output), 42, "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&got).expect("the trap ran").trim(),
        "TERM"
    );
    // Released at once (the lease was 30 s): the lock is free now.
    let client = LockClient::new(server.backend());
    assert!(client
        .lock("graceful")
        .try_lock()
        .expect("try_lock")
        .is_some());
}
