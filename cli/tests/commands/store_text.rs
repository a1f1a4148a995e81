//! What the store holds, as `dlock` prints it: any client can write holder ids, lock names
//! and candidates, so text output shows their control characters escaped while `--json`
//! carries them exactly; and the shape of `status`'s answer (`--check`, its JSON).

use crate::support;

use std::process::Output;
use std::sync::Arc;

use dlocks::backend::DistributedLock;
use dlocks::LockClient;
use serde_json::Value;
use support::postgres_server::PostgresServer;
use support::redis_server::RedisServer;
use support::{code, stderr, stdout};

/// A client id that retitles the terminal's window, clears the screen and hides what follows.
const EVIL: &str = "evil\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[8m";

/// The same, as text output shows it.
const EVIL_SHOWN: &str = "evil\\x1b]0;owned\\x07\\x1b[2J\\x1b[8m";

fn json(output: &Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

/// Holds `escaped-report` with holder ids and `escaped-election` with a candidate full of
/// escape sequences, and reads them with `dlock`.
fn assert_store_text_is_escaped(
    backend: Arc<dyn DistributedLock>,
    dlock: impl Fn(&[&str]) -> Output,
) {
    let client = LockClient::builder(backend)
        .client_id(EVIL)
        .build()
        .expect("client");
    let guard = client.lock("escaped-report").lock().expect("lock");
    let leading = client
        .leader_election("escaped-election")
        .campaign(&format!("node{EVIL}"))
        .expect("campaign");
    for args in [
        &["status", "escaped-report"][..],
        &["list", "escaped-*"],
        &["leader", "escaped-election"],
        &["status", "escaped-election"],
        &["force-unlock", "nothing-here", "--if-holder", EVIL],
    ] {
        let output = dlock(args);
        let printed = format!("{}{}", stdout(&output), stderr(&output));
        assert!(
            !printed.contains('\u{1b}'),
            "{args:?} printed an ESC: {printed:?}"
        );
        assert!(
            !printed.contains('\u{7}'),
            "{args:?} printed a BEL: {printed:?}"
        );
        assert!(printed.contains(EVIL_SHOWN), "{args:?}: {printed}");
    }
    // JSON carries the text exactly.
    let status = json(&dlock(&["status", "escaped-report", "--json"]));
    assert_eq!(status["holders"][0]["owner"], guard.owner(), "{status}");
    let listed = json(&dlock(&["list", "escaped-*", "--json"]));
    assert!(
        listed
            .as_array()
            .expect("an array")
            .iter()
            .any(|entry| entry["holders"][0]["owner"] == guard.owner()),
        "{listed}"
    );
    let leader = json(&dlock(&["leader", "escaped-election", "--json"]));
    assert_eq!(leader["leader"], format!("node{EVIL}"));
    drop((guard, leading));
}

#[test]
fn holder_ids_and_candidates_print_escaped_on_redis() {
    let server = RedisServer::start();
    assert_store_text_is_escaped(Arc::new(server.backend()), |args| {
        support::run(&server, args)
    });
}

#[test]
fn holder_ids_and_candidates_print_escaped_on_postgres() {
    let server = PostgresServer::start();
    let url = server.url();
    assert_store_text_is_escaped(Arc::new(server.backend()), |args| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
            .env_remove("REDIS_URL")
            .args(["--backend", &url])
            .args(args)
            .output()
            .expect("dlock runs")
    });
}

#[test]
fn status_check_answers_like_flock_and_json_says_only_what_is_true() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let check = |name: &str| code(&support::run(&server, &["status", "--check", name]));
    assert_eq!(check("deploy"), 1, "free");
    assert_eq!(code(&support::run(&server, &["status", "deploy"])), 0);
    let guard = client.lock("deploy").lock().expect("lock");
    assert_eq!(check("deploy"), 0, "held");
    // An exclusive hold has no read or write side, and a lock no synchronizer.
    let status = json(&support::run(&server, &["status", "deploy", "--json"]));
    assert!(status["holders"][0].get("write").is_none(), "{status}");
    assert!(status.get("synchronizer").is_none(), "{status}");
    drop(guard);
    let writer = client
        .read_write_lock("config")
        .write_lock()
        .lock()
        .expect("write lock");
    let status = json(&support::run(&server, &["status", "config", "--json"]));
    assert_eq!(status["holders"][0]["write"], true, "{status}");
    drop(writer);
    let semaphore = client.semaphore("quota");
    semaphore.try_set_permits(2).expect("set");
    assert_eq!(check("quota"), 0, "a semaphore set is in use");
    let status = json(&support::run(&server, &["status", "quota", "--json"]));
    assert_eq!(status["synchronizer"]["count"], 2, "{status}");
}
