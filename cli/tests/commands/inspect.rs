//! `dlock status`, `list`, `force-unlock`, and bad input, against a real `redis-server`.

use crate::support;

use std::time::Duration;

use dlocks::LockClient;
use serde_json::Value;
use support::redis_server::RedisServer;
use support::redisson::Redisson;
use support::{code, listed_names, run, stderr, stdout};

fn json(output: &std::process::Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

#[test]
fn status_shows_the_holder_and_the_remaining_lease() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.backend())
        .client_id("reporting-7")
        .build()
        .expect("client");
    let guard = client
        .lock("nightly-report")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let status = json(&run(&server, &["status", "nightly-report", "--json"]));
    assert_eq!(status["held"], true);
    assert_eq!(status["held_as"], "exclusive");
    let owner = status["holders"][0]["owner"].as_str().expect("an owner");
    assert!(owner.starts_with("reporting-7:"), "{owner}");
    let lease = status["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(lease > 50_000 && lease <= 60_000, "{lease}");
    let text = stdout(&run(&server, &["status", "nightly-report"]));
    // By its hold id, after its client's name once the client's record is in the store.
    assert!(text.contains("held (exclusive) by "), "{text}");
    assert!(text.contains("reporting-7:"), "{text}");
    drop(guard);
    let status = json(&run(&server, &["status", "nightly-report", "--json"]));
    assert_eq!(status["held"], false);
    assert_eq!(status["remaining_lease_ms"], Value::Null);
}

/// Who holds it, as its client's record says: the client's name, host and pid, and for how
/// long; and the same in `list`. Written by the client within a second of its hold.
pub fn assert_status_and_list_name_the_holders_client(
    status: impl Fn(&[&str]) -> std::process::Output,
) {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|host| host.trim().to_owned())
        .unwrap_or_default();
    let pid = u64::from(std::process::id());
    let mut found = Value::Null;
    support::wait_until(
        "status names the holder's client",
        Duration::from_secs(10),
        || {
            found = json(&status(&["status", "billing-report", "--json"]));
            found["holders"][0]["client"]["name"] == "billing-worker"
        },
    );
    let holder = &found["holders"][0];
    assert_eq!(holder["client"]["host"], host.as_str(), "{found}");
    assert_eq!(holder["client"]["pid"], pid, "{found}");
    assert!(holder["held_for_ms"].as_u64().is_some(), "{found}");
    assert!(holder["owner"]
        .as_str()
        .is_some_and(|owner| owner.starts_with("billing-7:")));
    let text = stdout(&status(&["status", "billing-report"]));
    assert!(
        text.contains(&format!("billing-worker@{host} pid {pid}, for "))
            && text.contains("(billing-7:"),
        "{text}"
    );
    let listed = json(&status(&["list", "billing-*", "--json"]));
    assert_eq!(
        listed[0]["holders"][0]["client"]["name"], "billing-worker",
        "{listed}"
    );
    let text = stdout(&status(&["list", "billing-*"]));
    assert!(
        text.contains(&format!("billing-worker@{host} pid {pid}")),
        "{text}"
    );
}

#[test]
fn status_and_list_name_the_holders_client_host_pid_and_held_for() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .client_id("billing-7")
        .build()
        .expect("client");
    let _guard = client.lock("billing-report").lock().expect("lock");
    assert_status_and_list_name_the_holders_client(|args| run(&server, args));
}

/// A client that is gone (its record no longer refreshed) while its hold's lease still runs:
/// once the record has run out, the holder shows by its hold id alone.
pub fn assert_a_gone_clients_hold_shows_by_its_id(
    backend: std::sync::Arc<dyn dlocks::backend::DistributedLock>,
    status: impl Fn(&[&str]) -> std::process::Output,
) {
    let client = LockClient::builder(backend)
        .name("short-lived")
        .client_id("short-9")
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .expect("client");
    let lock = client.lock("abandoned-report");
    lock.lock_with_lease(Duration::from_secs(60))
        .expect("lock")
        .leak();
    let mut found = Value::Null;
    support::wait_until(
        "status names the holder's client",
        Duration::from_secs(10),
        || {
            found = json(&status(&["status", "abandoned-report", "--json"]));
            found["holders"][0]["client"]["name"] == "short-lived"
        },
    );
    // The process would have died here: nothing of the client refreshes its record any more.
    drop(lock);
    drop(client);
    support::wait_until("the record runs out", Duration::from_secs(15), || {
        found = json(&status(&["status", "abandoned-report", "--json"]));
        found["holders"][0]["client"].is_null()
    });
    assert_eq!(found["held"], true, "{found}");
    assert!(
        found["holders"][0]["owner"]
            .as_str()
            .is_some_and(|owner| owner.starts_with("short-9:")),
        "{found}"
    );
    let text = stdout(&status(&["status", "abandoned-report"]));
    assert!(
        text.contains("(no client record: gone, or not a dlock client)"),
        "{text}"
    );
}

#[test]
fn status_counts_the_clients_waiting_for_a_lock() {
    let server = RedisServer::start();
    let holder = LockClient::new(server.backend());
    let waiter = LockClient::new(server.backend());
    let guard = holder.lock("contended").lock().expect("lock");
    let waiting = std::thread::spawn(move || {
        let lock = waiter.lock("contended");
        lock.try_lock_for(Duration::from_secs(30))
            .expect("wait")
            .is_some()
    });
    let mut found = Value::Null;
    support::wait_until(
        "status counts the waiting client",
        Duration::from_secs(10),
        || {
            found = json(&run(&server, &["status", "contended", "--json"]));
            found["subscribers"] == 1
        },
    );
    assert_eq!(found["queued_waiters"], 0, "{found}");
    let text = stdout(&run(&server, &["status", "contended"]));
    assert!(text.contains(", 1 client waiting"), "{text}");
    drop(guard);
    assert!(
        waiting.join().expect("the waiting thread"),
        "the waiter took the lock"
    );
}

#[test]
fn a_gone_clients_hold_shows_by_its_id_once_its_record_ran_out() {
    let server = RedisServer::start();
    assert_a_gone_clients_hold_shows_by_its_id(std::sync::Arc::new(server.backend()), |args| {
        run(&server, args)
    });
}

#[test]
fn list_finds_held_locks_by_pattern_and_leaves_out_other_keys() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let _a = client.lock("deploy:web").lock().expect("lock");
    let _b = client.lock("deploy:db").lock().expect("lock");
    let _c = client.lock("report").lock().expect("lock");
    let _d = client.fenced_lock("deploy:ledger").lock().expect("lock");
    let mut redisson = Redisson::new(&server);
    assert_eq!(
        redisson.try_lock("deploy:java", Duration::from_secs(30)),
        None
    );
    // Keys that are not locks: a user's hash, a string, and the layout's own keys.
    let mut admin = server.admin();
    let _: () = redis::cmd("HSET")
        .arg("deploy:profile")
        .arg("email")
        .arg("a@b")
        .query(&mut admin)
        .expect("HSET");
    let _: () = redis::cmd("SET")
        .arg("deploy:flag")
        .arg("1")
        .query(&mut admin)
        .expect("SET");
    let listed = json(&run(&server, &["list", "deploy:*", "--json"]));
    let names: Vec<&str> = listed
        .as_array()
        .expect("an array")
        .iter()
        .map(|lock| lock["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        names,
        ["deploy:db", "deploy:java", "deploy:ledger", "deploy:web"]
    );
    let all = json(&run(&server, &["list", "--json"]));
    assert_eq!(all.as_array().map(Vec::len), Some(5));
    let limited = json(&run(&server, &["list", "--limit", "2", "--json"]));
    assert_eq!(limited.as_array().map(Vec::len), Some(2));
    let text = stdout(&run(&server, &["list", "nothing*"]));
    assert!(text.contains("no lock matching"), "{text}");
}

#[test]
fn force_unlock_frees_a_lock_of_any_kind_and_says_whether_it_was_held() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let plain = client.lock("a").lock().expect("lock");
    let write = client
        .read_write_lock("b")
        .write_lock()
        .lock()
        .expect("lock");
    let read = client
        .read_write_lock("c")
        .read_lock()
        .lock()
        .expect("lock");
    for name in ["a", "b", "c"] {
        let output = json(&run(&server, &["force-unlock", name, "--json"]));
        assert_eq!(output["unlocked"], true, "{name}");
        let status = json(&run(&server, &["status", name, "--json"]));
        assert_eq!(status["held"], false, "{name}");
    }
    let again = json(&run(&server, &["force-unlock", "a", "--json"]));
    assert_eq!(again["unlocked"], false);
    assert!(stdout(&run(&server, &["force-unlock", "a"])).contains("was not locked"));
    for guard in [plain, write, read] {
        assert!(guard.unlock().expect_err("force-unlocked").is_not_held());
    }
}

#[test]
fn bad_input_is_a_usage_error_with_exit_code_2() {
    let server = RedisServer::start();
    let cases: [&[&str]; 7] = [
        &["run", "x", "--wait", "soon", "--", "true"],
        &["run", "x", "--lease", "3d", "--", "true"],
        &["run", "x", "--fair", "--write", "--", "true"],
        &["run", "x"],
        &["run", "", "--", "true"],
        &["run", "x", "--lease", "10ms", "--", "true"],
        &["frobnicate"],
    ];
    for args in cases {
        let output = run(&server, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(!stderr(&output).is_empty(), "{args:?} says what was wrong");
    }
    let mut admin = server.admin();
    let _: () = redis::cmd("SET")
        .arg("plain-string")
        .arg("hello")
        .query(&mut admin)
        .expect("SET");
    let output = run(&server, &["status", "plain-string"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("is a string, not a lock"),
        "{}",
        stderr(&output)
    );
    // A number is what a latch or a semaphore keeps under its name: shown, not refused.
    let _: () = redis::cmd("SET")
        .arg("a-count")
        .arg("3")
        .query(&mut admin)
        .expect("SET");
    let output = run(&server, &["status", "a-count"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("count 3"), "{}", stdout(&output));
}

#[test]
fn an_unreachable_server_exits_69() {
    let server = RedisServer::start();
    let port = support::redis_server::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["run", "x", "--", "true"][..],
        &["status", "x"],
        &["list"],
        &["force-unlock", "x"],
    ] {
        let output = support::dlock(&server)
            .env("REDIS_URL", &url)
            .args(args)
            .output()
            .expect("dlock runs");
        assert_eq!(code(&output), 69, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot use the Redis server"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn a_malformed_url_says_what_is_wrong_with_it() {
    let server = RedisServer::start();
    for (url, says) in [
        ("redis://127.0.0.1:99999", "invalid port number"),
        ("redis://:6379", "empty host"),
        ("http://127.0.0.1:6379", "unsupported Redis URL (http://)"),
    ] {
        let output = support::dlock(&server)
            .env("REDIS_URL", url)
            .args(["status", "x"])
            .output()
            .expect("dlock runs");
        assert_eq!(code(&output), 2, "{url}: {}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains(says) && !message.contains("InvalidClientConfig"),
            "{url}: {message}"
        );
    }
}

#[test]
fn status_and_list_show_semaphores_latches_and_leaders() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let sem = client.semaphore("jobs:quota");
    sem.try_set_permits(3).expect("set");
    let _permit = sem.acquire().expect("permit");
    let latch = client.count_down_latch("jobs:warm-up");
    latch.try_set_count(2).expect("set");
    let _leading = client
        .leader_election("jobs:scheduler")
        .campaign("node-a")
        .expect("campaign");

    let status = json(&run(&server, &["status", "jobs:quota", "--json"]));
    let synchronizer = &status["synchronizer"];
    assert_eq!(synchronizer["count"], 2, "{status}");
    let permits = synchronizer["permits_held"].as_array().expect("permits");
    assert_eq!(permits.len(), 1);
    assert_eq!(permits[0]["id"].as_str().map(str::len), Some(32));
    let text = stdout(&run(&server, &["status", "jobs:quota"]));
    assert!(text.contains("semaphore: 2 available, 1 held"), "{text}");
    let text = stdout(&run(&server, &["status", "jobs:warm-up"]));
    assert!(text.contains("count 2"), "{text}");
    let text = stdout(&run(&server, &["status", "jobs:scheduler"]));
    assert!(text.contains("election: led by \"node-a\""), "{text}");

    let listed = json(&run(&server, &["list", "jobs:*", "--json"]));
    let names = listed_names(&listed);
    assert_eq!(names, ["jobs:quota", "jobs:scheduler"]);
}

#[test]
fn leader_prints_the_current_leader_and_its_token() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let text = stdout(&run(&server, &["leader", "scheduler"]));
    assert!(text.contains("nobody leads"), "{text}");
    let leading = client
        .leader_election("scheduler")
        .campaign("node-a")
        .expect("campaign");
    let shown = json(&run(&server, &["leader", "scheduler", "--json"]));
    assert_eq!(shown["leader"], "node-a");
    assert_eq!(shown["token"].as_u64(), Some(leading.token()));
    let lease = shown["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(lease > 0 && lease <= 30_000, "{lease}");
    leading.resign().expect("resign");
    let shown = json(&run(&server, &["leader", "scheduler", "--json"]));
    assert_eq!(shown["leader"], Value::Null);
}

/// `force-unlock` frees the hold it saw and says whose it was; `--if-holder ID` frees the lock
/// only from that hold, in one step, and changes nothing (exit 1) when another holds it.
pub fn assert_force_unlock_frees_only_the_hold_it_names(
    backend: std::sync::Arc<dyn dlocks::backend::DistributedLock>,
    dlock: impl Fn(&[&str]) -> std::process::Output,
) {
    let client = LockClient::builder(backend)
        .client_id("batch-3")
        .build()
        .expect("client");
    let lock = client.lock("nightly");
    let guard = lock.lock().expect("lock");
    let owner = guard.owner().to_owned();
    let output = dlock(&["force-unlock", "nightly", "--if-holder", "batch-9:1"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("is not held by batch-9:1"),
        "{}",
        stdout(&output)
    );
    assert!(!guard.is_lost() && lock.is_locked().expect("status"));
    let freed = json(&dlock(&[
        "force-unlock",
        "nightly",
        "--if-holder",
        &owner,
        "--json",
    ]));
    assert_eq!(freed["unlocked"], true, "{freed}");
    assert_eq!(freed["freed"][0]["owner"], owner.as_str(), "{freed}");
    assert!(guard.unlock().expect_err("freed").is_not_held());
    let output = dlock(&["force-unlock", "nightly", "--if-holder", &owner]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    // The plain form says whose hold it freed.
    let again = lock.lock().expect("lock");
    let text = stdout(&dlock(&["force-unlock", "nightly"]));
    assert!(
        text.contains("force-unlocked") && text.contains(again.owner()),
        "{text}"
    );
    assert!(again.unlock().expect_err("freed").is_not_held());
}

#[test]
fn force_unlock_frees_only_the_hold_it_names() {
    let server = RedisServer::start();
    assert_force_unlock_frees_only_the_hold_it_names(
        std::sync::Arc::new(server.backend()),
        |args| run(&server, args),
    );
    // A Redisson holder (a hold count of 2) is freed whole.
    let mut redisson = Redisson::new(&server);
    assert_eq!(redisson.try_lock("java-job", Duration::from_secs(30)), None);
    assert_eq!(redisson.try_lock("java-job", Duration::from_secs(30)), None);
    let freed = json(&run(&server, &["force-unlock", "java-job", "--json"]));
    assert_eq!(freed["unlocked"], true, "{freed}");
    let status = json(&run(&server, &["status", "java-job", "--json"]));
    assert_eq!(status["held"], false, "{status}");
}

/// A `dlock run` holder killed with `kill -9` keeps its lock until its lease runs out; on the
/// host it ran on, `status` says its process is gone.
#[test]
fn a_holder_killed_on_this_host_shows_as_gone() {
    let server = RedisServer::start();
    let mut holder = support::dlock(&server)
        .args([
            "run",
            "killed-holder",
            "--lease",
            "30s",
            "--",
            "sleep",
            "60",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("dlock run starts");
    support::wait_until("the lock held", Duration::from_secs(10), || {
        json(&run(&server, &["status", "killed-holder", "--json"]))["holders"][0]["client"]["pid"]
            == holder.id()
    });
    let alive = json(&run(&server, &["status", "killed-holder", "--json"]));
    assert_eq!(
        alive["holders"][0]["client"]["process_gone"], false,
        "{alive}"
    );
    holder.kill().expect("kill -9");
    holder.wait().expect("reaped");
    let status = json(&run(&server, &["status", "killed-holder", "--json"]));
    assert_eq!(
        status["held"], true,
        "held until its lease runs out: {status}"
    );
    assert_eq!(
        status["holders"][0]["client"]["process_gone"], true,
        "{status}"
    );
    let text = stdout(&run(&server, &["status", "killed-holder"]));
    assert!(text.contains("no such process on this host"), "{text}");
}
