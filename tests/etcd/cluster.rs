//! A 3-member etcd cluster losing members under held locks: its leader killed, a member
//! paused, a majority paused, a member restarted. Holds ride out what the cluster rides out,
//! and are reported lost by their deadline when it cannot answer.

use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::{LockClient, LockError};

/// The watchdog lease of these tests: renewals every 2 s, a hold lost 6 s after the last.
const WATCHDOG: Duration = Duration::from_secs(6);

/// How long the cluster may take to settle after a fault (a new leader, a member back).
const SETTLE: Duration = Duration::from_secs(20);

fn client(cluster: &EtcdCluster) -> LockClient {
    LockClient::builder(cluster.backend())
        .watchdog_lease(WATCHDOG)
        .build()
        .expect("client")
}

/// Takes `name` with a fresh client, waiting for it while the cluster settles: an acquire
/// that may wait goes on through calls the cluster does not answer yet.
fn lock_eventually(cluster: &EtcdCluster, name: &str) -> Result<(), LockError> {
    match client(cluster).lock(name).try_lock_for(SETTLE)? {
        Some(guard) => guard.unlock(),
        None => panic!("{name} was not free within {SETTLE:?}"),
    }
}

#[test]
fn holds_survive_the_loss_of_the_leader() {
    let mut cluster = EtcdCluster::start(3);
    let holder = client(&cluster);
    let name = unique("leader-loss");
    let guard = holder.lock(name.clone()).lock().expect("lock");
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    assert!(cluster.await_leader(SETTLE).is_some(), "a new leader");
    // Two watchdog leases: every renewal in between went to the members left.
    thread::sleep(WATCHDOG * 2);
    assert!(!guard.is_lost(), "the hold rode out the election");
    assert!(
        client(&cluster)
            .lock(name.clone())
            .try_lock()
            .expect("try")
            .is_none(),
        "still held"
    );
    lock_eventually(&cluster, &unique("after-leader-loss")).expect("new locks");
    guard.unlock().expect("unlock");
}

/// An acquire with a long wait made just as the leader dies: the member that gets it keeps it
/// while the others elect a new leader, and does not answer in time. The acquire is made again
/// as the same hold within the caller's wait, and takes the lock once the cluster answers.
#[test]
fn an_acquire_with_a_long_wait_rides_out_the_death_of_the_leader() {
    let mut cluster = EtcdCluster::start(3);
    // A request timeout shorter than an election: the first try after the leader's death is
    // not answered in time.
    let client = LockClient::builder(
        cluster
            .backend_builder()
            .request_timeout(Duration::from_millis(100))
            .build()
            .expect("backend"),
    )
    .watchdog_lease(WATCHDOG)
    .build()
    .expect("client");
    let warm = client.lock(unique("warm")).lock().expect("lock");
    warm.unlock().expect("unlock");
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let guard = client
        .fenced_lock(unique("after-the-leader"))
        .try_lock_for(Duration::from_secs(15))
        .expect("no error while the wait lasts")
        .expect("taken within the wait");
    assert!(!guard.is_lost());
    guard.unlock().expect("unlock");
}

#[test]
fn a_paused_member_costs_a_request_timeout_not_the_hold() {
    let cluster = EtcdCluster::start(3);
    let holder = client(&cluster);
    let name = unique("paused-member");
    let guard = holder.lock(name.clone()).lock().expect("lock");
    // The first endpoint, the one every backend starts on.
    cluster.pause(0);
    thread::sleep(WATCHDOG * 2);
    assert!(
        !guard.is_lost(),
        "renewals moved to the members that answer"
    );
    lock_eventually(&cluster, &unique("beside-paused")).expect("new locks");
    // A waiter woken by the release, whatever member its watch was on.
    let waiter = client(&cluster);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock(name.clone())
                .try_lock_for(SETTLE)
                .expect("wait")
                .map(|g| g.unlock().is_ok())
        });
        thread::sleep(Duration::from_millis(500));
        guard.unlock().expect("unlock");
        assert_eq!(waiting.join().expect("waiter"), Some(true));
    });
    cluster.resume(0);
}

#[test]
fn a_paused_majority_fails_calls_within_bounds_and_loses_holds_by_their_deadline() {
    let cluster = EtcdCluster::start(3);
    let holder = client(&cluster);
    let name = unique("paused-majority");
    let guard = holder.lock(name.clone()).lock().expect("lock");
    let events = holder.lease_events();
    let other = client(&cluster);
    let paused_at = Instant::now();
    cluster.pause(1);
    cluster.pause(2);
    // No quorum: a step fails (never hangs) within the backend's bounds.
    let started = Instant::now();
    let error = other
        .lock(unique("no-quorum"))
        .try_lock()
        .expect_err("no quorum, no lock");
    assert!(error.is_unavailable(), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a step against a cluster without quorum returned"
    );
    // The hold is lost by its deadline (a watchdog lease after its last renewal), pushed.
    let lost = loop {
        let event = events
            .recv_timeout(WATCHDOG + SETTLE)
            .expect("a loss event by the deadline");
        if matches!(event.change, dlocks::LeaseChange::Lost { .. }) {
            break event;
        }
    };
    assert_eq!(&*lost.name, name.as_str());
    assert!(guard.is_lost());
    assert!(
        paused_at.elapsed() < WATCHDOG + Duration::from_secs(5),
        "lost by its deadline, told {:?} after the pause",
        paused_at.elapsed()
    );
    cluster.resume(1);
    cluster.resume(2);
    // The lost hold's key stays until its lease runs out (a new leader gives every lease its
    // whole TTL again): then another client takes the lock.
    lock_eventually(&cluster, &name).expect("locks again once the majority is back");
}

#[test]
fn a_restarted_member_rejoins_and_serves_locks() {
    let mut cluster = EtcdCluster::start(3);
    let holder = client(&cluster);
    let name = unique("restarted");
    let guard = holder.lock(name.clone()).lock().expect("lock");
    cluster.restart(2);
    assert!(cluster.await_leader(SETTLE).is_some());
    thread::sleep(WATCHDOG);
    assert!(!guard.is_lost());
    // The restarted member alone, as a backend that knows only it.
    let member = cluster.members()[2].url();
    let deadline = Instant::now() + SETTLE;
    let only_restarted = loop {
        match dlocks::etcd::EtcdBackend::builder(&member)
            .request_timeout(Duration::from_secs(2))
            .build()
        {
            Ok(backend) => break LockClient::new(backend),
            Err(error) => {
                assert!(Instant::now() < deadline, "{error}");
                thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(
        only_restarted
            .lock(name.clone())
            .try_lock()
            .expect("try")
            .is_none(),
        "the restarted member sees the hold"
    );
    guard.unlock().expect("unlock");
    let again = only_restarted.lock(name).try_lock().expect("try");
    assert!(again.is_some(), "free once released");
}

#[test]
fn a_waiter_whose_watch_fell_behind_a_compaction_is_still_woken() {
    let cluster = EtcdCluster::start(3);
    let name = unique("compacted");
    // A follower is the waiter's first member (its watch is there); the holder and the
    // operator talk to the other two.
    let leader = cluster.leader().expect("a leader");
    let follower = (0..3).find(|at| *at != leader).expect("a follower");
    let urls: Vec<String> = cluster.members().iter().map(|m| m.url()).collect();
    let others: Vec<String> = (0..3)
        .filter(|at| *at != follower)
        .map(|at| urls[at].clone())
        .collect();
    let backend = |endpoints: String| {
        dlocks::etcd::EtcdBackend::builder(&endpoints)
            .request_timeout(Duration::from_secs(2))
            .build()
            .expect("backend")
    };
    // The holder counts on a long fixed lease: the waiter's only way to the lock in time is
    // to hear of the release.
    let holder = LockClient::new(backend(others.join(",")));
    let guard = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(120))
        .expect("lock");
    let waiter = LockClient::new(backend(format!("{},{}", urls[follower], others.join(","))));
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock(name.clone())
                .try_lock_for(Duration::from_secs(40))
                .expect("wait")
                .map(|g| g.unlock().is_ok())
        });
        thread::sleep(Duration::from_millis(500));
        // The member the waiter's watch is on stops; meanwhile the lock is released and the
        // history compacted past the watch's last revision, on the members left.
        cluster.pause(follower);
        guard.unlock().expect("unlock");
        let etcdctl = |args: &[&str]| {
            let output = std::process::Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", others.join(",")))
                .args(args)
                .output()
                .expect("etcdctl");
            assert!(output.status.success(), "etcdctl {args:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        etcdctl(&["put", &format!("{name}-after"), "x"]);
        let status = etcdctl(&["get", &format!("{name}-after"), "--write-out=fields"]);
        let revision = status
            .lines()
            .find_map(|line| line.strip_prefix("\"Revision\" : "))
            .expect("a revision")
            .trim()
            .to_owned();
        etcdctl(&["compact", &revision]);
        assert_eq!(
            waiting.join().expect("waiter"),
            Some(true),
            "the watch moved on, read the keys again and woke the waiter"
        );
    });
    cluster.resume(follower);
}

/// Reads made while the members elect a new leader (the leader killed) answer once the
/// election is over, within their request timeout: a member between leaders refuses a read
/// ("leader changed", "no leader"), and a read is safe to ask again.
#[test]
fn reads_during_an_election_wait_for_the_new_leader() {
    let mut cluster = EtcdCluster::start(3);
    let client = client(&cluster);
    let lock = client.lock(unique("election-reads"));
    let guard = lock.lock().expect("lock");
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let until = Instant::now() + Duration::from_secs(2);
    let mut reads = 0;
    while Instant::now() < until {
        assert!(lock.is_locked().expect("a read during the election"));
        reads += 1;
    }
    assert!(reads > 0);
    guard.unlock().expect("unlock");
}
