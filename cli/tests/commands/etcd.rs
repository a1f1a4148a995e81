//! `dlock` on etcd: `etcd://host:port` picks the backend, and run, status, list and
//! force-unlock work as on Redis; `dlock run` and `etcdctl lock` exclude each other.

use crate::support;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlocks::LockClient;
use serde_json::Value;
use support::etcd_server::EtcdCluster;
use support::{code, listed_names, stderr, stdout, Scratch};

fn url(cluster: &EtcdCluster) -> String {
    cluster.endpoints().replace("http://", "etcd://")
}

fn dlock_on(cluster: &EtcdCluster) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    command
        .env("DLOCK_URL", url(cluster))
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn run(cluster: &EtcdCluster, args: &[&str]) -> Output {
    dlock_on(cluster)
        .args(args)
        .output()
        .expect("the dlock binary runs")
}

fn json(output: &Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

/// Waits (bounded) until `path` exists.
fn await_file(path: &std::path::Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell script that creates `started`, then waits (bounded) for `go` to exist.
fn hold_until(started: &std::path::Path, go: &std::path::Path) -> String {
    format!(
        "touch {0}; i=0; while [ ! -e {1} ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done",
        started.display(),
        go.display()
    )
}

fn finish(child: Child) -> Output {
    child.wait_with_output().expect("the process ends")
}

#[test]
fn run_status_list_and_force_unlock_on_etcd() {
    let cluster = EtcdCluster::single();
    let scratch = Scratch::new("etcd-run");
    let file = scratch.path("counter");
    std::fs::write(&file, "0").expect("counter file");
    // Two runs over a shared file, through --backend: the lock keeps the read and write together.
    let script = format!(
        "for i in 1 2 3 4 5; do n=$(cat {0}); echo $((n + 1)) > {0}; done",
        file.display()
    );
    let runs: Vec<_> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_dlock"))
                .args(["--backend", &url(&cluster), "run", "etcd-counter", "--"])
                .args(["sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("dlock run")
        })
        .collect();
    for child in runs {
        let output = finish(child);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    assert_eq!(std::fs::read_to_string(&file).expect("read").trim(), "10");

    let client = LockClient::builder(cluster.backend())
        .client_id("reporting-7")
        .build()
        .expect("client");
    let held = client
        .lock("deploy:web")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let fair = client.fair_lock("deploy:fair").lock().expect("fair");
    let _other = client.lock("report").lock().expect("lock");
    let semaphore = client.semaphore("deploy:slots");
    assert!(semaphore.try_set_permits(3).expect("permits"));
    let _permit = semaphore.acquire().expect("permit");

    let status = json(&run(&cluster, &["status", "deploy:web", "--json"]));
    assert_eq!(status["held"], true);
    assert_eq!(status["held_as"], "exclusive");
    let owner = status["holders"][0]["owner"].as_str().expect("an owner");
    assert!(owner.starts_with("reporting-7:"), "{owner}");
    let lease = status["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(lease > 50_000 && lease <= 61_000, "{lease}");
    let token = status["last_fencing_token"].as_u64().expect("a token");
    assert!(token > 0, "{status}");

    let fair_status = json(&run(&cluster, &["status", "deploy:fair", "--json"]));
    assert_eq!(fair_status["held_as"], "fair", "{fair_status}");

    let listed = json(&run(&cluster, &["list", "deploy:*", "--json"]));
    // The locks by name, then the synchronizers in use.
    assert_eq!(
        listed_names(&listed),
        ["deploy:fair", "deploy:web", "deploy:slots"]
    );
    let limited = json(&run(&cluster, &["list", "*", "--limit", "1", "--json"]));
    assert_eq!(listed_names(&limited), ["deploy:fair", "deploy:slots"]);

    let slots = json(&run(&cluster, &["status", "deploy:slots", "--json"]));
    assert_eq!(slots["synchronizer"]["count"], 2, "{slots}");

    // A run on a held lock waits, and gives up after --wait with 75.
    let output = run(
        &cluster,
        &["run", "deploy:web", "--wait", "200ms", "--", "true"],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));

    let forced = json(&run(&cluster, &["force-unlock", "deploy:fair", "--json"]));
    assert_eq!(forced["unlocked"], true);
    assert!(!client.fair_lock("deploy:fair").is_locked().expect("status"));
    let text = stdout(&run(&cluster, &["force-unlock", "deploy:web"]));
    assert!(text.contains("force-unlocked"), "{text}");
    assert!(held.unlock().is_err(), "the holder finds its lock gone");
    let listed = json(&run(&cluster, &["list", "deploy:w*", "--json"]));
    assert_eq!(listed_names(&listed), Vec::<&str>::new());
    drop(fair);
}

#[test]
fn dlock_run_and_etcdctl_lock_exclude_each_other() {
    let cluster = EtcdCluster::single();
    let scratch = Scratch::new("etcd-etcdctl");

    // etcdctl holds: a run gives up, and runs once etcdctl is done.
    let (started, go) = (scratch.path("ctl-started"), scratch.path("ctl-go"));
    let etcdctl = cluster
        .etcdctl()
        .args([
            "lock",
            "shared-job",
            "--",
            "sh",
            "-c",
            &hold_until(&started, &go),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl lock");
    await_file(&started, "etcdctl taking the lock");
    let status = json(&run(&cluster, &["status", "shared-job", "--json"]));
    assert_eq!(status["held"], true, "{status}");
    let output = run(
        &cluster,
        &["run", "shared-job", "--wait", "200ms", "--", "true"],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    let waiting = dlock_on(&cluster)
        .args(["run", "shared-job", "--wait", "20s", "--", "true"])
        .spawn()
        .expect("dlock run");
    std::fs::write(&go, "").expect("go");
    let output = finish(etcdctl);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = finish(waiting);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    // dlock holds: etcdctl waits until the run is over.
    let (started, go) = (scratch.path("run-started"), scratch.path("run-go"));
    let ctl_ran = scratch.path("ctl-ran");
    let holder = dlock_on(&cluster)
        .args(["run", "shared-job", "--", "sh", "-c"])
        .arg(hold_until(&started, &go))
        .spawn()
        .expect("dlock run");
    await_file(&started, "dlock taking the lock");
    let etcdctl = cluster
        .etcdctl()
        .args(["lock", "shared-job", "--", "sh", "-c"])
        .arg(format!("touch {}", ctl_ran.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl lock");
    // etcdctl's key queues behind the run's: the lock shows it as a queued contender.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = json(&run(&cluster, &["status", "shared-job", "--json"]));
        if status["queued_waiters"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "etcdctl never queued: {status}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!ctl_ran.exists(), "etcdctl ran while dlock held");
    std::fs::write(&go, "").expect("go");
    let output = finish(holder);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = finish(etcdctl);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(ctl_ran.exists(), "etcdctl ran once dlock was done");
}

#[test]
fn etcd_urls_show_no_password() {
    let port = support::postgres_server::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args([
            "--backend",
            &format!("etcd://root:s3cret@127.0.0.1:{port}"),
            "status",
            "x",
        ])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    let message = stderr(&output);
    assert!(!message.contains("s3cret"), "{message}");
}

/// A fair waiter whose process is killed holds the queue up for seconds, not for its place's
/// slot (the fair wait timeout, five minutes): the process kept its place alive, and nothing
/// does once it is gone.
#[test]
fn a_killed_fair_waiter_holds_the_queue_up_for_seconds_only() {
    let cluster = EtcdCluster::single();
    let name = "deploy:queue";
    let queued = |count: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = json(&run(&cluster, &["status", name, "--json"]));
            if status["queued_waiters"] == count {
                return;
            }
            assert!(Instant::now() < deadline, "never {count} queued: {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let holder = LockClient::new(cluster.backend());
    let held = holder.fair_lock(name).lock().expect("lock");
    let mut killed = dlock_on(&cluster)
        .args(["run", "--fair", name, "--", "true"])
        .spawn()
        .expect("dlock run");
    queued(1);
    killed.kill().expect("SIGKILL");
    let output = finish(killed);
    assert!(!output.status.success(), "killed while waiting");
    let live = LockClient::new(cluster.backend());
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            live.fair_lock(name)
                .try_lock_for(Duration::from_secs(30))
                .expect("wait")
                .map(|guard| guard.unlock())
        });
        // Whenever it comes, the live waiter is behind the dead waiter's place while it lasts.
        held.unlock().expect("unlock");
        let taken = waiter.join().expect("live waiter");
        assert!(
            matches!(taken, Some(Ok(()))),
            "the live waiter got the lock within its wait: {taken:?}"
        );
    });
}
