//! Replica acknowledgement on a real master and replica: with the replica healthy every hold
//! is on it when `lock()` returns; with the replica paused acquires fail clearly within the
//! sync timeout and leave nothing held, renewals are reported failed, and both work again once
//! it is back. Without replicas (or with the setting off) no `WAIT` is sent.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LeaseChange, LockClient, LockClientBuilder, LockError};
use support::redis_server::RedisServer;

const SYNC_TIMEOUT: Duration = Duration::from_millis(300);

fn backend(master: &RedisServer) -> RedisBackend {
    master
        .backend_builder()
        .replica_sync_timeout(SYNC_TIMEOUT)
        .build()
        .expect("connect to the master")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.admin())
        .expect("EXISTS")
        == 1
}

/// The commands a client sent while `f` ran (the scripts' own commands left out).
fn commands_sent_during(server: &RedisServer, f: impl FnOnce()) -> Vec<String> {
    let mut monitor = server.admin();
    let _: String = redis::cmd("MONITOR").query(&mut monitor).expect("MONITOR");
    f();
    let _: String = redis::cmd("ECHO")
        .arg("end-of-steps")
        .query(&mut server.admin())
        .expect("ECHO");
    let mut sent = Vec::new();
    loop {
        let line = match monitor.recv_response().expect("MONITOR line") {
            redis::Value::SimpleString(line) => line,
            other => panic!("unexpected MONITOR output {other:?}"),
        };
        if line.contains("end-of-steps") {
            return sent;
        }
        if !line.contains(" lua]") {
            let command = line.split('"').nth(1).unwrap_or_default();
            sent.push(command.to_ascii_uppercase());
        }
    }
}

#[test]
fn with_a_healthy_replica_every_hold_is_on_it_when_lock_returns() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let backend = backend(&master);
    assert_eq!(backend.replicas(), 1);
    let client = LockClient::new(backend);
    for round in 0..20 {
        let name = format!("replicas:healthy:{round}");
        let guard = client.lock(&name).lock().expect("lock");
        // No waiting here: the acquire returned only once the replica had acknowledged it.
        assert!(
            exists(&replica, &name),
            "round {round}: the hold is on the replica"
        );
        guard.unlock().expect("unlock");
        assert!(!exists(&replica, &name), "round {round}: so is its release");
    }
    let fenced = client
        .fenced_lock("replicas:fenced")
        .lock()
        .expect("fenced lock");
    let token: u64 = redis::cmd("GET")
        .arg("redisson_lock_token:{replicas:fenced}")
        .query(&mut replica.admin())
        .expect("the token counter on the replica");
    assert_eq!(token, fenced.token());
}

#[test]
fn a_paused_replica_fails_acquires_within_the_sync_timeout_and_nothing_stays_held() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let client = LockClient::new(backend(&master));
    let lock = client.lock("replicas:paused");
    lock.lock().expect("lock").unlock().expect("unlock");

    replica.pause();
    for attempt in ["try_lock", "lock", "try_lock_for"] {
        let started = Instant::now();
        let result = match attempt {
            "try_lock" => lock.try_lock().map(|guard| guard.is_some()),
            "lock" => lock.lock().map(|_| true),
            _ => lock
                .try_lock_for(Duration::from_secs(5))
                .map(|guard| guard.is_some()),
        };
        let elapsed = started.elapsed();
        match result {
            Err(LockError::NotReplicated {
                lock: Some(name),
                replicas: 1,
                timeout,
            }) => {
                assert_eq!(name, "replicas:paused");
                assert_eq!(timeout, SYNC_TIMEOUT);
            }
            other => panic!("{attempt}: expected NotReplicated, got {other:?}"),
        }
        // Bounded by the sync timeout plus the undo, not by the 5 s the caller would wait.
        assert!(
            elapsed < SYNC_TIMEOUT + Duration::from_secs(2),
            "{attempt} took {elapsed:?}"
        );
        assert!(
            !exists(&master, "replicas:paused"),
            "{attempt}: nothing held"
        );
        assert!(!lock.is_locked().expect("status"), "{attempt}");
    }
    // Another client can take the name at once when sync is not asked for.
    let unsynced = LockClient::new(
        master
            .backend_builder()
            .replica_sync(false)
            .build()
            .expect("connect"),
    );
    unsynced
        .lock("replicas:paused")
        .try_lock()
        .expect("try_lock without sync")
        .expect("free: the failed acquires left nothing")
        .unlock()
        .expect("unlock");

    replica.resume();
    let guard = lock.lock().expect("works again once the replica is back");
    assert!(exists(&replica, "replicas:paused"));
    guard.unlock().expect("unlock");
}

#[test]
fn a_renewal_no_replica_acknowledged_is_reported_and_recovers_when_it_is_back() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let lease = Duration::from_secs(3);
    let client = LockClientBuilder::new(Arc::new(backend(&master)))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let guard = client.lock("replicas:renewal").lock().expect("lock");

    replica.pause();
    let deadline = Instant::now() + lease;
    let failure = loop {
        let event = events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("a renewal failure is reported before the lease runs out");
        if let LeaseChange::RenewalFailed { error, .. } = event.change {
            break error;
        }
    };
    assert!(
        matches!(*failure, LockError::NotReplicated { replicas: 1, .. }),
        "{failure:?}"
    );
    replica.resume();
    let recovered = loop {
        let event = events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("renewals recover before the lease runs out");
        match event.change {
            LeaseChange::RenewalRecovered { .. } => break true,
            LeaseChange::Lost { reason } => panic!("lost: {reason:?}"),
            _ => {}
        }
    };
    assert!(recovered);
    assert!(!guard.is_lost());
    guard.unlock().expect("unlock");
}

#[test]
fn without_replicas_or_with_sync_off_no_wait_is_sent() {
    let master = RedisServer::start();
    let client = LockClient::new(backend(&master));
    let lock = client.lock("replicas:none");
    lock.lock().expect("warm up").unlock().expect("unlock");
    let sent = commands_sent_during(&master, || {
        lock.lock().expect("lock").unlock().expect("unlock");
    });
    assert!(!sent.contains(&"WAIT".to_owned()), "{sent:?}");

    let replica = RedisServer::start_replica_of(&master);
    let synced = LockClient::new(backend(&master));
    let unsynced = LockClient::new(
        master
            .backend_builder()
            .replica_sync(false)
            .build()
            .expect("connect"),
    );
    let sent = commands_sent_during(&master, || {
        let guard = synced.lock("replicas:some").lock().expect("lock");
        guard.unlock().expect("unlock");
    });
    let waits = sent.iter().filter(|command| *command == "WAIT").count();
    assert_eq!(
        waits, 2,
        "one WAIT after the acquire, one after the release: {sent:?}"
    );
    let sent = commands_sent_during(&master, || {
        let guard = unsynced.lock("replicas:off").lock().expect("lock");
        guard.unlock().expect("unlock");
    });
    assert!(!sent.contains(&"WAIT".to_owned()), "{sent:?}");
    drop(replica);
}

#[test]
fn a_replica_that_attaches_later_is_waited_for() {
    let master = RedisServer::start();
    let backend = backend(&master);
    assert_eq!(backend.replicas(), 0);
    let client = LockClient::new(backend.clone());
    let replica = RedisServer::start_replica_of(&master);
    // The count is read again within a second, in the pipeline of a lock step.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut rounds = 0;
    while backend.replicas() == 0 {
        assert!(
            Instant::now() < deadline,
            "the new replica was never counted"
        );
        client
            .lock("replicas:later")
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
        std::thread::sleep(Duration::from_millis(50));
        rounds += 1;
    }
    assert!(rounds > 0);
    replica.pause();
    let error = client
        .lock("replicas:later")
        .lock()
        .expect_err("not acknowledged");
    assert!(
        matches!(error, LockError::NotReplicated { replicas: 1, .. }),
        "{error:?}"
    );
    replica.resume();
}

#[test]
fn a_user_without_role_and_wait_is_told_at_connect_unless_sync_is_off() {
    let master = RedisServer::start();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("narrow")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-role")
        .arg("-wait")
        .query(&mut master.admin())
        .expect("ACL SETUSER");
    let url = master.url_for("narrow", "pw");
    let error = RedisBackend::connect(&url).expect_err("ROLE is refused");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("ROLE") && message.contains("replica_sync"),
        "{message}"
    );
    let backend = RedisBackend::builder(&url)
        .replica_sync(false)
        .build()
        .expect("connects with sync off");
    LockClient::new(backend)
        .lock("narrow")
        .lock()
        .expect("lock")
        .unlock()
        .expect("unlock");
}

#[test]
fn a_zero_sync_timeout_is_a_configuration_error() {
    let master = RedisServer::start();
    let error = master
        .backend_builder()
        .replica_sync_timeout(Duration::ZERO)
        .build()
        .expect_err("zero timeout");
    assert!(
        matches!(&error, LockError::Config { message, .. } if message.contains("replica_sync_timeout")),
        "{error:?}"
    );
}
