//! Semaphores and leader elections across OS processes on one real server: never more holders
//! than permits, a permit of a process killed with `kill -9` back within its lease, a killed
//! leader replaced within its lease by one with a higher token.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockClientBuilder};
use support::helper_process::{helper_role, Reaped};
use support::redis_server::RedisServer;

const PERMITS: u32 = 3;
const SEMAPHORE: &str = "procs:semaphore";
const DEAD_HOLDER: &str = "procs:semaphore-dead";
const ELECTION: &str = "procs:election";
/// The watchdog lease of the helpers that die: what their permit or leadership outlives them by.
const SHORT_LEASE: Duration = Duration::from_millis(1500);

#[test]
fn helper() {
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let backend = RedisBackend::connect(&url).expect("helper connects");
    let short = || {
        LockClientBuilder::new(Arc::new(backend.clone()))
            .watchdog_lease(SHORT_LEASE)
            .build()
            .expect("client")
    };
    match role.as_str() {
        "permits" => permits(&url, backend.clone()),
        "permit-hold" => {
            let client = short();
            let permit = client.semaphore(DEAD_HOLDER).acquire().expect("permit");
            println!("HOLDING {}", permit.id());
            std::thread::sleep(Duration::from_secs(60));
        }
        "lead" => {
            let client = short();
            let leading = client
                .leader_election(ELECTION)
                .campaign("helper")
                .expect("campaign");
            println!("LEADING {}", leading.token());
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown helper role {other}"),
    }
}

/// Two threads, each taking a permit 25 times and counting the holders on the server while it
/// holds one; prints the most it saw, and `DONE`.
fn permits(url: &str, backend: RedisBackend) {
    let client = LockClient::new(backend);
    let most = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let sem = client.semaphore(SEMAPHORE);
                s.spawn(move || {
                    let mut con = redis::Client::open(url)
                        .and_then(|client| client.get_connection())
                        .expect("a connection for the count");
                    let mut most = 0;
                    for _ in 0..25 {
                        let permit = sem.acquire().expect("permit");
                        let holders: i64 = redis::cmd("INCR")
                            .arg("procs:holders")
                            .query(&mut con)
                            .expect("INCR");
                        most = most.max(holders);
                        std::thread::sleep(Duration::from_millis(1));
                        let _: i64 = redis::cmd("DECR")
                            .arg("procs:holders")
                            .query(&mut con)
                            .expect("DECR");
                        assert!(!permit.is_lost());
                        permit.release().expect("release");
                    }
                    most
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("thread"))
            .max()
            .unwrap_or(0)
    });
    println!("MOST {most}");
    println!("DONE");
}

#[test]
fn six_processes_never_hold_more_permits_than_the_semaphore_has() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    assert!(client
        .semaphore(SEMAPHORE)
        .try_set_permits(PERMITS)
        .expect("set"));
    let mut helpers: Vec<Reaped> = (0..6)
        .map(|_| Reaped::spawn(module_path!(), "permits", &server.url()))
        .collect();
    let mut most = 0;
    for helper in &mut helpers {
        let lines = helper.lines_until(Some("DONE"));
        assert!(lines.iter().any(|line| line.ends_with("DONE")), "{lines:?}");
        for line in lines {
            // The first line the helper prints follows the test harness's own words.
            if let Some(seen) = line.split("MOST ").nth(1) {
                most = most.max(seen.parse::<u32>().expect("a count"));
            }
        }
    }
    assert!(most <= PERMITS, "{most} holders at once");
    assert!(most > 1, "the permits were shared ({most} at most)");
    assert_eq!(
        client
            .semaphore(SEMAPHORE)
            .available_permits()
            .expect("available"),
        u64::from(PERMITS),
        "every permit given back"
    );
}

#[test]
fn a_permit_held_by_a_killed_process_comes_back_within_its_lease() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let sem = client.semaphore(DEAD_HOLDER);
    assert!(sem.try_set_permits(1).expect("set"));
    let mut holder = Reaped::spawn(module_path!(), "permit-hold", &server.url());
    holder.lines_until(Some("HOLDING"));
    assert!(
        sem.try_acquire().expect("try").is_none(),
        "the other process holds it"
    );
    holder.0.kill().expect("kill -9 the holder");
    holder.0.wait().expect("reap");
    let killed = Instant::now();
    let permit = sem
        .try_acquire_for(Duration::from_secs(20))
        .expect("wait")
        .expect("the permit comes back");
    assert!(
        killed.elapsed() < SHORT_LEASE + Duration::from_secs(2),
        "back within its lease: {:?}",
        killed.elapsed()
    );
    permit.release().expect("release");
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease_by_a_higher_token() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let election = client.leader_election(ELECTION);
    let mut leader = Reaped::spawn(module_path!(), "lead", &server.url());
    let lines = leader.lines_until(Some("LEADING"));
    let token: u64 = lines
        .iter()
        .find_map(|line| line.split("LEADING ").nth(1))
        .expect("the helper leads")
        .parse()
        .expect("a token");
    assert_eq!(
        election.leader().expect("leader").as_deref(),
        Some("helper")
    );
    let changes = election.observe().expect("observe");
    assert_eq!(
        changes.recv_timeout(Duration::from_secs(5)),
        Ok(Some("helper".to_owned()))
    );
    leader.0.kill().expect("kill -9 the leader");
    leader.0.wait().expect("reap");
    let killed = Instant::now();
    let leading = election
        .try_campaign_for("parent", Duration::from_secs(20))
        .expect("campaign")
        .expect("leads once the dead leader's lease ends");
    assert!(
        killed.elapsed() < SHORT_LEASE + Duration::from_secs(2),
        "replaced within its lease: {:?}",
        killed.elapsed()
    );
    assert!(leading.token() > token);
    // The observer saw the old leader go (possibly only as the new one coming, when both
    // happened between two of its looks) and the new one come.
    loop {
        match changes
            .recv_timeout(Duration::from_secs(10))
            .expect("a change")
        {
            None => continue,
            Some(leader) => {
                assert_eq!(leader, "parent");
                break;
            }
        }
    }
    leading.resign().expect("resign");
}
