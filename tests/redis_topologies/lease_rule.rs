//! The lease rule on real servers, for the ways it depends on Redis itself: a replica that does
//! not acknowledge a re-entry, a RedLock extend that misses its quorum, a fair grant whose
//! message is late, and the RedLock's drift margin.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlocks::backend::{Clock, SystemClock};
use dlocks::redis::{RedLockBackend, RedisBackend};
use dlocks::{ClockDrift, LockClient, LockClientBuilder, LockError};
use support::redis_server::{RedLockEnv, RedisServer};
use support::tcp_proxy::TcpProxy;

/// The store still holds `name` for `owner` at least until `deadline`, read through `admin`.
fn store_outlives(server: &RedisServer, name: &str, deadline: std::time::Instant) -> bool {
    let pttl: i64 = redis::cmd("PTTL")
        .arg(name)
        .query(&mut server.admin())
        .expect("PTTL");
    let after = SystemClock.now();
    pttl >= 0 && deadline <= after + Duration::from_millis(pttl.unsigned_abs() + 1)
}

/// With the replica paused, a re-entry that extends a hold is not acknowledged: it fails with
/// `NotReplicated`, and the hold it would have extended is left in place (it used to be
/// deleted by the undo, while the thread kept trusting it).
#[test]
fn an_unacknowledged_reentry_leaves_the_hold_it_extends() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let build = || {
        master
            .backend_builder()
            .replica_sync_timeout(Duration::from_millis(300))
            .build()
            .expect("connect to the master")
    };
    let (client, other) = (LockClient::new(build()), LockClient::new(build()));
    let name = "lease-rule:unacknowledged-reentry";
    let lock = client.lock(name);
    let held = lock
        .lock_with_lease(Duration::from_secs(30))
        .expect("acknowledged");
    replica.pause();
    let error = lock
        .lock_with_lease(Duration::from_secs(60))
        .expect_err("no replica acknowledges the extend");
    assert!(matches!(error, LockError::NotReplicated { .. }), "{error}");
    assert!(!held.is_lost());
    assert!(
        store_outlives(&master, name, held.lease_deadline()),
        "the hold the thread still trusts is on the master"
    );
    assert!(lock.is_held_by_current_thread().expect("status"));
    assert!(
        other.lock(name).try_lock().expect("try").is_none(),
        "nobody else can take it"
    );
    replica.resume();
    master.await_online_replicas(1);
    // The hold is confirmed with the store before it is re-entered locally again.
    let again = lock
        .lock_with_lease(Duration::from_secs(1))
        .expect("re-enter");
    assert_eq!(lock.hold_count().expect("count"), 2);
    drop(again);
    held.unlock().expect("unlock");
    assert!(!lock.is_locked().expect("status"));
}

/// A RedLock re-entry that reaches only one of three nodes misses its quorum: it fails, and
/// leaves the hold it would have extended on every node that had it (it used to give it back
/// there, and to leave a release behind on the stalled node, ending a hold the thread still
/// trusted).
#[test]
fn a_red_lock_extend_that_misses_its_quorum_leaves_the_hold_where_it_was() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let client = LockClient::new(RedLockEnv::red_lock(&servers));
    let name = "lease-rule:red-lock-extend";
    let lock = client.lock(name);
    servers[2].kill();
    let held = lock
        .lock_with_lease(Duration::from_secs(30))
        .expect("two of three nodes are up");
    servers[1].pause();
    let error = lock
        .lock_with_lease(Duration::from_secs(60))
        .expect_err("only one node answers the extend");
    assert!(error.is_unavailable(), "{error}");
    servers[1].resume();
    assert!(!held.is_lost());
    for server in &servers[..2] {
        assert!(
            store_outlives(server, name, held.lease_deadline()),
            "the hold is still on node {}",
            server.port()
        );
    }
    assert!(
        lock.is_held_by_current_thread().expect("status"),
        "still held on a majority"
    );
    held.unlock().expect("unlock");
}

/// A fair waiter granted the lock by a release, whose message reaches it after the grant's
/// short lease has run out, must not trust the grant from when it noticed it: it confirms the
/// hold with the store first.
#[test]
fn a_fair_grant_noticed_late_is_confirmed_before_it_is_trusted() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let holder = LockClient::new(server.backend());
    let waiter_backend = RedisBackend::builder(&proxy.url())
        .build()
        .expect("connect through the proxy");
    // The grant lease is the watchdog lease when that is shorter than the usual 2 s.
    let watchdog = Duration::from_millis(1200);
    let waiter = LockClientBuilder::new(Arc::new(waiter_backend))
        .watchdog_lease(watchdog)
        .build()
        .expect("client");
    let name = "lease-rule:fair-grant-late";
    let held = holder
        .fair_lock(name)
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let lock = waiter.fair_lock(name);
            let guard = lock.lock().expect("granted");
            let deadline = guard.lease_deadline();
            if !guard.is_lost() {
                assert!(
                    store_outlives(&server, name, deadline),
                    "the waiter trusts a grant the store no longer has"
                );
                guard.unlock().expect("unlock");
            }
        });
        // Queued, with its grant offer, once it listens on its own channel.
        server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
        proxy.hold_traffic(true);
        held.unlock()
            .expect("unlock: the lock is granted to the waiter");
        // The grant's message waits in the network longer than the grant's lease.
        thread::sleep(watchdog + Duration::from_millis(300));
        proxy.hold_traffic(false);
        waiting.join().expect("waiter");
    });
}

/// A RedLock's drift allowance is the client's margin on every deadline: at the grant and at
/// every renewal (it used to be kept at the grant only).
#[test]
fn a_red_lock_keeps_its_drift_margin_at_every_renewal() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let backend = RedLockBackend::builder(servers.iter().map(RedisServer::backend).collect())
        .node_timeout(Duration::from_millis(300))
        .clock_drift_factor(0.05)
        .build()
        .expect("red lock");
    let lease = Duration::from_millis(900);
    let client = LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let drift = client.clock_drift();
    assert_eq!(drift.factor(), 0.05);
    assert!(drift.margin(lease) > ClockDrift::DEFAULT.margin(lease));
    let lock = client.lock("lease-rule:red-lock-drift");
    let guard = lock.lock().expect("lock");
    let after = SystemClock.now();
    assert!(guard.lease_deadline() <= after + lease - drift.margin(lease));
    for renewals in 1..=3 {
        // The deadline a renewal sets is its start + the lease − the margin: read as soon as
        // the renewal is counted, it cannot be further off than that.
        let counted = wait_for_renewals(&client, renewals);
        let deadline = guard.lease_deadline();
        assert!(
            deadline <= counted + lease - drift.margin(lease),
            "renewal {renewals}: deadline {:?} from now, more than the lease less its margin",
            deadline - SystemClock.now()
        );
    }
    assert!(!guard.is_lost());
    guard.unlock().expect("unlock");
}

/// Waits (bounded) until the client's watchdog has renewed `count` holds; the instant it saw it.
fn wait_for_renewals(client: &LockClient, count: u64) -> std::time::Instant {
    let limit = SystemClock.now() + Duration::from_secs(10);
    loop {
        let now = SystemClock.now();
        if client.watchdog_stats().renewed >= count {
            return now;
        }
        assert!(now < limit, "no renewal {count}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// A release stuck in the network is retried after the response timeout and succeeds; the
/// thread takes the lock again; then the stuck original reaches the server (its latch long
/// gone): it finds no hold of its own id, and ends nothing. With the thread's id as the hold's,
/// it used to delete the new hold while the thread trusted it.
#[test]
fn a_release_that_reaches_the_server_after_its_retry_spares_the_threads_next_hold() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let backend = RedisBackend::builder(&proxy.url())
        .response_timeout(Duration::from_millis(200))
        .build()
        .expect("connect through the proxy");
    let client = LockClient::new(backend);
    let other = LockClient::new(server.backend());
    let name = "lease-rule:late-release";
    let lock = client.lock(name);
    let first = lock.lock().expect("lock");
    // The release's first attempt is held in the network; its retry goes through.
    proxy.hold_back_next("redisson_unlock_latch");
    first.unlock().expect("released by the retry");
    let again = lock.lock().expect("the thread takes the lock again");
    // More traffic on the connections, so any latch is deleted, as it is in use.
    assert!(lock.is_held_by_current_thread().expect("status"));
    assert_eq!(
        proxy.deliver_held(),
        1,
        "the stuck release reaches the server now"
    );
    assert!(!again.is_lost());
    assert!(lock.is_held_by_current_thread().expect("status"));
    assert!(
        other.lock(name).try_lock().expect("try").is_none(),
        "another client got in next to the thread's hold"
    );
    again.unlock().expect("unlock");
}

/// A RedLock acquire that two of three nodes do not answer in time fails, and leaves its undo
/// behind the acquire on each stalled connection (should the acquire land late, the undo lands
/// right after it). The thread's next acquire asks under the same hold id (the first one's
/// outcome is unknown) and takes all three nodes; then the stalled acquires and their undos
/// land. The undo takes back what its own acquire added, not the hold: it used to end the
/// hold whole on both nodes, a majority, while the thread trusted it, and another client took
/// the lock beside it.
#[test]
fn a_red_lock_acquires_late_undo_spares_the_threads_next_hold() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let proxies = [
        TcpProxy::start(servers[0].port()),
        TcpProxy::start(servers[1].port()),
    ];
    let node = |url: &str| {
        RedisBackend::builder(url)
            .response_timeout(Duration::from_millis(300))
            .build()
            .expect("connect")
    };
    let nodes = vec![
        node(&proxies[0].url()),
        node(&proxies[1].url()),
        servers[2].backend(),
    ];
    let backend = RedLockBackend::builder(nodes)
        .node_timeout(Duration::from_millis(300))
        .build()
        .expect("a RedLock");
    let client = LockClient::new(backend);
    let other = LockClient::new(RedLockEnv::red_lock(&servers));
    let name = "lease-rule:red-lock-late-undo";
    let lock = client.lock(name);
    // Warm connections to every node, so the held acquire is the next request on each.
    lock.lock().expect("lock").unlock().expect("unlock");
    for proxy in &proxies {
        proxy.hold_back_next(name);
    }
    let error = lock.try_lock().expect_err("two of three nodes are silent");
    assert!(error.is_unavailable(), "{error}");
    let held = lock
        .try_lock()
        .expect("every node answers again")
        .expect("the lock is free");
    for proxy in &proxies {
        assert!(proxy.deliver_held() >= 1, "the stalled acquire lands now");
    }
    assert!(!held.is_lost());
    assert!(
        other.lock(name).try_lock().expect("try").is_none(),
        "another client took the lock beside the thread's hold"
    );
    assert!(lock.is_held_by_current_thread().expect("status"));
    held.unlock().expect("unlock");
    assert!(!lock.is_locked().expect("status"));
}
