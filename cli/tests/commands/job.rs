//! `dlock run` owns its whole job: every process the command starts is signalled, waited for,
//! and killed with `dlock`, so that a second `dlock run` on the same name never runs while a
//! process of the first job lives, whatever killed `dlock` and wherever the process went.

use crate::support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
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

/// A job whose first process writes its pid to `pgid`, with a step under `timeout(1)`, which
/// puts it in a process group of its own: a shell that writes its pid to `sleeper` and becomes
/// `sleep seconds`.
fn timeout_step(pgid: &Path, sleeper: &Path, seconds: u32) -> String {
    // Its output goes elsewhere than dlock's, which the tests read to its end.
    format!(
        "echo $$ > {}; timeout 30 sh -c 'echo $$ > {}; exec sleep {seconds}' \
         > /dev/null 2>&1 & wait",
        pgid.display(),
        sleeper.display()
    )
}

/// A command that creates `overlap` if process `pid` (read from its file) lives, and `ran` in
/// any case.
fn check_gone(pid: &Path, overlap: &Path, ran: &Path) -> String {
    format!(
        "p=$(cat {pid}); s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); \
         if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo \"$p\" >> {overlap}; fi; touch {ran}",
        pid = pid.display(),
        overlap = overlap.display(),
        ran = ran.display()
    )
}

/// Field `index` of `/proc/<pid>/stat` counted after the command's name (0: state, 1: parent,
/// 2: process group).
fn stat_field(pid: u32, index: usize) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process lives");
    let (_, after_name) = stat.rsplit_once(") ").expect("a stat line");
    after_name
        .split_whitespace()
        .nth(index)
        .and_then(|field| field.parse().ok())
        .expect("a number")
}

/// The keeper of a job: the parent of its first process, whose pid is in `pgid`.
fn keeper_of(pgid: &Path) -> u32 {
    stat_field(read_pid(pgid), 1)
}

/// Starts `dlock run` on `name` with `args` before `--`, and `script` as its command.
fn start(server: &RedisServer, name: &str, args: &[&str], script: &str) -> Child {
    run_command(dlock(server), name, args, script)
        .spawn()
        .expect("dlock starts")
}

/// `command` (`dlock`, or a supervisor's command line ending with `dlock`) made to run
/// `script` holding `name`.
fn run_command(mut command: Command, name: &str, args: &[&str], script: &str) -> Command {
    command
        .arg("run")
        .arg(name)
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null());
    command
}

/// Waits until the second run's command ran, and checks it saw no process of the first job.
fn assert_ran_alone(second: Child, scratch: &Scratch) {
    let output = second.wait_with_output().expect("the second dlock ends");
    assert_alone(&output, scratch);
}

/// Checks that the second run's command, which `output` ended, ran and saw no process of the
/// first job.
fn assert_alone(output: &Output, scratch: &Scratch) {
    assert_eq!(code(output), 0, "{}", stderr(output));
    assert!(scratch.path("ran").exists(), "the second command ran");
    assert!(
        !scratch.path("overlap").exists(),
        "the second command ran while the first job lived: {:?}",
        std::fs::read_to_string(scratch.path("overlap"))
    );
}

/// Waits until the second run's command ran, and checks it saw no process of the first job,
/// and that the first job's file was never created.
fn assert_no_overlap(second: Child, scratch: &Scratch, started: Instant) {
    assert_ran_alone(second, scratch);
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

#[test]
fn timeout_s_kill_around_dlock_takes_its_whole_job_with_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-timeout-kill");
    let (pgid, created) = (scratch.path("pgid"), scratch.path("created"));
    let started = Instant::now();
    // GNU timeout runs dlock in a process group of its own, and when the time is up sends the
    // signal to dlock and then to that whole group.
    let mut timeout = Command::new("timeout");
    timeout
        .env("REDIS_URL", server.url())
        .args(["-s", "KILL", "60", env!("CARGO_BIN_EXE_dlock")])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let job = script(&pgid, &created);
    let mut supervisor = run_command(timeout, "nightly", &["--lease", "2s"], &job)
        .spawn()
        .expect("timeout starts");
    let keeper = keeper_of(&pgid);
    // The time is up: the signal timeout's timer raises, sent now rather than waited for.
    send_signal(supervisor.id(), "ALRM");
    supervisor.wait().expect("timeout ends");
    let check = check_no_overlap(&pgid, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_no_overlap(second, &scratch, started);
    wait_until("the keeper exits", Duration::from_secs(10), || {
        !running(keeper)
    });
}

#[test]
fn a_kill_of_dlocks_process_group_takes_its_whole_job_with_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-killpg");
    let (pgid, created) = (scratch.path("pgid"), scratch.path("created"));
    let started = Instant::now();
    // A group of its own, as a process manager starts it (and so the kill reaches no test).
    let mut command = dlock(&server);
    command.process_group(0);
    let job = script(&pgid, &created);
    let mut first = run_command(command, "nightly", &["--lease", "2s"], &job)
        .spawn()
        .expect("dlock starts");
    let keeper = keeper_of(&pgid);
    let status = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", first.id())])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -KILL -{}", first.id());
    first.wait().expect("reaped");
    let check = check_no_overlap(&pgid, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_no_overlap(second, &scratch, started);
    wait_until("the keeper exits", Duration::from_secs(10), || {
        !running(keeper)
    });
}

#[test]
fn a_job_step_under_timeout_keeps_the_lock_until_it_ends() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-timeout-step");
    let (pgid, sleeper) = (scratch.path("pgid"), scratch.path("sleeper"));
    let first = start(&server, "nightly", &[], &timeout_step(&pgid, &sleeper, 3));
    let group = read_pid(&pgid);
    let sleeping = read_pid(&sleeper);
    assert_ne!(
        stat_field(sleeping, 2),
        group,
        "the step runs in timeout's own group"
    );
    // Passed on to the job's process group: the script ends, the step under timeout does not.
    send_signal(first.id(), "TERM");
    let check = check_gone(&sleeper, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    let output = first.wait_with_output().expect("the first dlock ends");
    assert_eq!(code(&output), 143, "{}", stderr(&output));
    assert!(
        !running(sleeping),
        "the first dlock released the lock while the step under timeout ran"
    );
    assert_ran_alone(second, &scratch);
}

#[test]
fn a_dlock_killed_with_sigkill_takes_the_processes_that_left_the_group_with_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-kill9-step");
    let (pgid, sleeper) = (scratch.path("pgid"), scratch.path("sleeper"));
    let job = timeout_step(&pgid, &sleeper, 8);
    let mut first = start(&server, "nightly", &["--lease", "2s"], &job);
    let keeper = keeper_of(&pgid);
    read_pid(&sleeper);
    first.kill().expect("kill -9 dlock");
    first.wait().expect("reaped");
    let check = check_gone(&sleeper, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_ran_alone(second, &scratch);
    wait_until("the keeper exits", Duration::from_secs(10), || {
        !running(keeper)
    });
}

#[test]
fn sigkill_before_the_lease_runs_out_reaches_the_processes_that_left_the_group() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-paused-step");
    let (pgid, sleeper) = (scratch.path("pgid"), scratch.path("sleeper"));
    let job = timeout_step(&pgid, &sleeper, 12);
    let first = start(&server, "nightly", &["--lease", "2s"], &job);
    read_pid(&pgid);
    read_pid(&sleeper);
    server.pause();
    // SIGTERM ends the script, SIGKILL before the lease runs out must end the step too; the
    // release goes unanswered, and `dlock` exits with 69.
    let output = first.wait_with_output().expect("the first dlock ends");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    server.resume();
    let check = check_gone(&sleeper, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    assert_ran_alone(second, &scratch);
}

#[test]
fn a_stopped_dlocks_keeper_kills_the_processes_that_left_the_group() {
    let server = RedisServer::start();
    let scratch = Scratch::new("job-stopped-step");
    let (pgid, sleeper) = (scratch.path("pgid"), scratch.path("sleeper"));
    let job = timeout_step(&pgid, &sleeper, 12);
    let first = start(&server, "nightly", &["--lease", "2s"], &job);
    read_pid(&pgid);
    read_pid(&sleeper);
    // Stopped, dlock renews nothing: the keeper kills the job before the lease runs out.
    send_signal(first.id(), "STOP");
    let check = check_gone(&sleeper, &scratch.path("overlap"), &scratch.path("ran"));
    let second = start(&server, "nightly", &["--wait", "20s"], &check);
    let alone = second.wait_with_output().expect("the second dlock ends");
    send_signal(first.id(), "CONT");
    let output = first.wait_with_output().expect("the first dlock ends");
    assert_alone(&alone, &scratch);
    // It lost the lock while stopped.
    assert_eq!(code(&output), 69, "{}", stderr(&output));
}
