//! Redis Sentinel: a master, two replicas and three sentinels as real processes. Locks are
//! taken through the sentinels; the master is killed under load and the locks follow the new
//! master, with bounded, clear errors meanwhile and no hold silently kept.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::{Duration, Instant};

use dlocks::{LeaseChange, LockClient, LockError};
use support::failover_load::keep_locking_through;
use support::sentinel::SentinelSetup;

fn client(setup: &SentinelSetup, lease: Duration) -> LockClient {
    let backend = setup
        .backend_builder()
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .replica_sync_timeout(Duration::from_millis(500))
        .build()
        .expect("connect through the sentinels");
    LockClient::builder(backend)
        .watchdog_lease(lease)
        .build()
        .expect("client")
}

#[test]
fn a_lock_taken_through_the_sentinels_is_on_the_master_they_name() {
    let setup = SentinelSetup::start();
    let client = client(&setup, Duration::from_secs(5));
    let guard = client.lock("sentinel:where").lock().expect("lock");
    assert!(
        on_the_master(&setup, "sentinel:where"),
        "the lock's hash is on the master"
    );
    guard.unlock().expect("unlock");
}

/// Whether key `name` is on the master the sentinels name.
fn on_the_master(setup: &SentinelSetup, name: &str) -> bool {
    let master = setup
        .servers
        .iter()
        .find(|server| server.port() == setup.master_port())
        .expect("the master");
    redis::cmd("EXISTS")
        .arg(name)
        .query(&mut master.admin())
        .expect("EXISTS")
}

#[test]
fn eight_threads_keep_locking_through_a_master_failover() {
    let mut setup = SentinelSetup::start();
    let client = client(&setup, Duration::from_secs(3));
    let mut promoted = None;
    let load = keep_locking_through(&client, "sentinel:load", || {
        let old = setup.kill_master();
        promoted = Some((old, setup.await_failover(old)));
    });
    let (old, new) = promoted.expect("failed over");
    println!(
        "master {old} killed; sentinels promoted {new} after {:?}; locks granted again {:?} \
         after the kill; {} acquisitions; {} errors: {:?}",
        load.failed_over,
        load.recovered,
        load.acquisitions,
        load.errors.len(),
        load.errors.iter().take(5).collect::<Vec<_>>()
    );
    load.assert_errors_are_actionable();
}

#[test]
fn a_hold_across_a_failover_is_kept_on_the_new_master_or_reported_lost() {
    let mut setup = SentinelSetup::start();
    let client = client(&setup, Duration::from_secs(3));
    let events = client.lease_events();
    let guard = client.lock("sentinel:held").lock().expect("lock");
    let old = setup.kill_master();
    let new = setup.await_failover(old);
    // Until the watchdog has renewed on the new master, or found the lock gone there.
    let renewed = client.watchdog_stats().renewed;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !guard.is_lost() && client.watchdog_stats().renewed == renewed {
        assert!(
            Instant::now() < deadline,
            "no renewal and no loss after the failover"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let master = setup
        .servers
        .iter()
        .find(|server| server.port() == new)
        .expect("the new master");
    let on_new_master: bool = redis::cmd("EXISTS")
        .arg("sentinel:held")
        .query(&mut master.admin())
        .expect("EXISTS");
    if guard.is_lost() {
        // The watchdog reports it as the deadline passes (a moment after the guard knows).
        let lost_event = std::iter::from_fn(|| events.recv_timeout(Duration::from_secs(5)).ok())
            .any(|event| matches!(event.change, LeaseChange::Lost { .. }));
        assert!(lost_event, "a lost hold is reported by a lease event");
        assert!(guard.unlock().expect_err("lost").is_not_held());
    } else {
        assert!(on_new_master, "a hold kept alive must be on the new master");
        guard.unlock().expect("unlock on the new master");
    }
}

#[test]
fn a_waiter_subscribed_before_a_failover_is_woken_by_a_release_on_the_new_master() {
    let mut setup = SentinelSetup::start();
    let holder = client(&setup, Duration::from_secs(3));
    let waiter = client(&setup, Duration::from_secs(3));
    let guard = holder
        .lock("sentinel:wake")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let (done, got) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let guard = waiter
            .lock("sentinel:wake")
            .try_lock_for(Duration::from_secs(40))
            .expect("wait");
        let _ = done.send((guard.is_some(), Instant::now()));
        drop(guard);
    });
    // Waiting (subscribed on the old master) before it dies.
    let old_master = setup
        .servers
        .iter()
        .find(|server| server.port() == setup.master_port())
        .expect("the master");
    old_master.await_subscriber("redisson_lock__channel:{sentinel:wake}");
    let old = setup.kill_master();
    let new = setup.await_failover(old);
    // The lock was replicated before it was granted, so the new master has it; the holder's
    // client reaches the new master once the sentinels agree on it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while holder.lock("sentinel:wake").is_locked().is_err() {
        assert!(
            Instant::now() < deadline,
            "the holder never reached the new master"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let new_master = setup
        .servers
        .iter()
        .find(|server| server.port() == new)
        .expect("the new master");
    // The waiter's pub/sub connection followed the new master.
    new_master.await_subscriber("redisson_lock__channel:{sentinel:wake}");
    let released = Instant::now();
    guard.unlock().expect("unlock on the new master");
    let (acquired, at) = got.recv().expect("the waiter's answer");
    assert!(acquired, "the waiter got the lock");
    // Woken by the release, not by its wait's cap (the 60 s lease).
    let woken = at.duration_since(released);
    assert!(
        woken < Duration::from_secs(5),
        "woken {woken:?} after the release"
    );
    thread.join().expect("waiter");
}

#[test]
fn redisson_and_dlock_share_locks_through_the_sentinels() {
    let setup = SentinelSetup::start();
    let master = setup
        .servers
        .iter()
        .find(|server| server.port() == setup.master_port())
        .expect("the master");
    let mut redisson = support::redisson::Redisson::new(master);
    let client = client(&setup, Duration::from_secs(5));
    // A Java service holds it (Redisson's own script, on the master): dlock waits.
    assert_eq!(
        redisson.try_lock("shared:sentinel", Duration::from_secs(30)),
        None
    );
    let lock = client.lock("shared:sentinel");
    assert!(lock.try_lock().expect("try_lock").is_none());
    let waiter = {
        let client = client.clone();
        std::thread::spawn(move || {
            client
                .lock("shared:sentinel")
                .try_lock_for(Duration::from_secs(20))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        })
    };
    master.await_subscriber("redisson_lock__channel:{shared:sentinel}");
    // Redisson's unlock publishes on the same channel: the dlock waiter wakes and takes it.
    assert_eq!(redisson.unlock("shared:sentinel"), Some(1));
    assert_eq!(waiter.join().expect("waiter"), Some(true));
    // And the other way round: a dlock holder excludes the Java side.
    let guard = lock.lock().expect("lock");
    assert!(redisson
        .try_lock("shared:sentinel", Duration::from_secs(30))
        .is_some());
    guard.unlock().expect("unlock");
}

#[test]
fn a_master_with_a_password_is_reached_with_the_master_credentials() {
    let setup = SentinelSetup::start_with_password("s3cret");
    let refused = setup
        .backend_builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect_err("no credentials for the master");
    assert!(
        matches!(refused, LockError::Config { .. }),
        "refused credentials are a configuration error: {refused:?}"
    );
    let backend = setup
        .backend_builder()
        .master_credentials(None, "s3cret")
        .build()
        .expect("connect with the master's password");
    let client = LockClient::new(backend);
    let guard = client.lock("sentinel:auth").lock().expect("lock");
    // Failover keeps the credentials: the promoted replica has the same password.
    let mut setup = setup;
    let old = setup.kill_master();
    setup.await_failover(old);
    let deadline = Instant::now() + Duration::from_secs(20);
    let on_new = loop {
        match client.lock("sentinel:auth").is_locked() {
            Ok(locked) => break locked,
            Err(error) => {
                assert!(error.is_unavailable(), "{error:?}");
                assert!(Instant::now() < deadline, "never reached the new master");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(on_new, "the replicated lock is on the new master");
    guard.unlock().expect("unlock on the new master");
}

#[test]
fn a_sentinel_url_names_the_sentinels_the_master_and_its_password() {
    let setup = SentinelSetup::start_with_password("s3cret");
    let sentinels: Vec<String> = setup.sentinels.iter().map(|s| s.address()).collect();
    // The password percent-encoded, as URLs carry them ("%65" is "e").
    let url = format!(
        "redis-sentinel://:s3cr%65t@{}/{}",
        sentinels.join(","),
        support::sentinel::MASTER_NAME
    );
    let backend = dlocks::redis::RedisBackend::builder(&url)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("the master through the sentinels the URL names");
    let client = LockClient::new(backend);
    let guard = client.lock("sentinel:by-url").lock().expect("lock");
    assert!(
        on_the_master(&setup, "sentinel:by-url"),
        "the lock is on the master the sentinels name"
    );
    guard.unlock().expect("unlock");
    for bad in [
        format!("redis-sentinel://{}", sentinels.join(",")),
        "redis-sentinel:///main".to_owned(),
    ] {
        let error = dlocks::redis::RedisBackend::builder(&bad)
            .build()
            .expect_err("a Sentinel URL without its master or sentinels");
        assert!(matches!(error, LockError::Config { .. }), "{error:?}");
        assert!(
            error.to_string().contains("redis-sentinel://"),
            "the error shows the URL's form: {error}"
        );
    }
}
