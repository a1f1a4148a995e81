//! Waiting on Redis: woken by release messages on one multiplexed pub/sub connection.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::LockClient;
use support::redis_server::{spawn_waiter, RedisServer};
use support::tcp_proxy::TcpProxy;

/// Subscribers on `channel`, as the server counts them.
fn subscribers(admin: &mut redis::Connection, channel: &str) -> i64 {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(admin)
        .expect("PUBSUB NUMSUB");
    count
}

/// The server's pub/sub client connections.
fn pubsub_clients(admin: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(admin)
        .expect("CLIENT LIST");
    list.lines().filter(|line| !line.is_empty()).count()
}

/// Polls `condition` every 10 ms, for at most 20 s (a loaded 2-core machine has taken more
/// than 5 s to subscribe six waiters).
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("never happened: {what}");
}

#[test]
fn a_release_wakes_a_waiter_long_before_the_holders_lease_ends() {
    let server = RedisServer::start();
    let holder = LockClient::new(server.backend());
    let waiter_backend = server.backend();
    let lease = Duration::from_secs(60);
    let lock = holder.lock("pubsub:wake");
    let guard = lock.lock_with_lease(lease).expect("lock");

    let (waiter, rx) = spawn_waiter(waiter_backend, "pubsub:wake");
    let mut admin = server.admin();
    eventually("the waiter subscribed", || {
        subscribers(&mut admin, "redisson_lock__channel:{pubsub:wake}") == 1
    });
    // Give the subscribed waiter time to retry and fall asleep, so the release below has to
    // wake it (were it still retrying, the retry would take the lock and the test pass anyway).
    std::thread::sleep(Duration::from_millis(100));
    guard.unlock().expect("unlock");
    // Without the release message the waiter would sleep until the 60 s lease ran out (and
    // give up after its 30 s wait): getting the lock at all shows the message woke it.
    rx.recv_timeout(Duration::from_secs(20))
        .expect("woken by the release");
    waiter.join().expect("waiter");
}

#[test]
fn one_connection_carries_every_channel_and_unsubscribes_after_the_last_waiter() {
    let server = RedisServer::start();
    let holder = LockClient::new(server.backend());
    let waiters_backend = server
        .backend_builder()
        .unsubscribe_linger(Duration::from_millis(50))
        .build()
        .expect("backend");
    let mut admin = server.admin();
    let names = ["pubsub:a", "pubsub:b", "pubsub:c"];
    let guards: Vec<_> = names
        .iter()
        .map(|name| {
            holder
                .lock(*name)
                .lock_with_lease(Duration::from_secs(60))
                .expect("lock")
        })
        .collect();
    let before = pubsub_clients(&mut admin);

    let waiters: Vec<_> = names
        .iter()
        .flat_map(|name| std::iter::repeat_n(*name, 2))
        .map(|name| {
            let backend = waiters_backend.clone();
            std::thread::spawn(move || {
                let client = LockClient::new(backend);
                let lock = client.lock(name);
                let guard = lock
                    .try_lock_for(Duration::from_secs(30))
                    .expect("wait")
                    .expect("acquired");
                std::thread::sleep(Duration::from_millis(20));
                guard.unlock().expect("unlock");
            })
        })
        .collect();
    for name in names {
        let channel = dlocks::redis::channel_name(name);
        eventually("every lock's channel is subscribed", || {
            subscribers(&mut admin, &channel) == 1
        });
    }
    assert_eq!(
        pubsub_clients(&mut admin),
        before + 1,
        "one pub/sub connection for all waiters"
    );

    drop(guards);
    for waiter in waiters {
        waiter.join().expect("waiter");
    }
    for name in names {
        let channel = dlocks::redis::channel_name(name);
        eventually("channels are unsubscribed after the last waiter", || {
            subscribers(&mut admin, &channel) == 0
        });
    }
}

#[test]
fn waiters_survive_a_killed_pubsub_connection_and_it_is_resubscribed() {
    let server = RedisServer::start();
    let holder = LockClient::new(server.backend());
    let waiter_backend = server.backend();
    let lock = holder.lock("pubsub:killed");
    // A short lease: a waiter that missed the release still gets the lock when it expires.
    let guard = lock.lock_with_lease(Duration::from_secs(3)).expect("lock");
    let channel = dlocks::redis::channel_name("pubsub:killed");

    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let client = LockClient::new(waiter_backend);
        let lock = client.lock("pubsub:killed");
        let guard = lock
            .try_lock_for(Duration::from_secs(30))
            .expect("wait")
            .expect("acquired");
        tx.send(()).expect("send");
        guard.unlock().expect("unlock");
    });
    let mut admin = server.admin();
    eventually("the waiter subscribed", || {
        subscribers(&mut admin, &channel) == 1
    });

    assert_eq!(server.kill_pubsub_clients().expect("CLIENT KILL"), 1);
    eventually("the connection is back and resubscribed", || {
        subscribers(&mut admin, &channel) == 1
    });

    guard.unlock().expect("unlock");
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the waiter got the lock");
    waiter.join().expect("waiter");
}

#[test]
fn the_pubsub_connection_closes_when_the_backend_is_dropped() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let backend = server.backend();
    let holder = LockClient::new(server.backend());
    let guard = holder
        .lock("pubsub:drop")
        .lock_with_lease(Duration::from_millis(300))
        .expect("lock");
    {
        let client = LockClient::new(backend.clone());
        // Waits (subscribed) until the lease runs out.
        let got = client
            .lock("pubsub:drop")
            .try_lock_for(Duration::from_secs(10))
            .expect("wait");
        assert!(got.is_some());
    }
    assert_eq!(pubsub_clients(&mut admin), 1);
    drop(guard);
    drop(backend);
    eventually("the pub/sub connection is closed", || {
        pubsub_clients(&mut admin) == 0
    });
}

#[test]
fn a_pubsub_connection_that_stops_delivering_is_replaced_when_a_poke_goes_unanswered() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let response_timeout = Duration::from_secs(1);
    let backend = RedisBackend::builder(&proxy.url())
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(response_timeout)
        .checkout_timeout(Duration::from_secs(3))
        // No channel goes idle during the test: the only poke is the waiter's.
        .unsubscribe_linger(Duration::from_secs(60))
        .build()
        .expect("a backend through the proxy");
    let waiting = LockClient::new(backend);
    let holder = LockClient::new(server.backend());

    // The pub/sub connection is up: a wait on a held lock subscribed through it.
    let first = holder.lock("stall:first").lock().expect("lock");
    let waited = waiting
        .lock("stall:first")
        .try_lock_for(Duration::from_millis(50))
        .expect("a bounded wait");
    assert!(waited.is_none());
    server.await_subscriber("redisson_lock__channel:{stall:first}");
    // It stops delivering while its socket stays open; command connections still work.
    proxy.freeze_subscribers();

    let lease = Duration::from_secs(60);
    let held = holder
        .lock("stall:x")
        .lock_with_lease(lease)
        .expect("lock with a long lease");
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let guard = waiting
            .lock("stall:x")
            .try_lock_for(Duration::from_secs(50))
            .expect("wait")
            .expect("acquired");
        tx.send(Instant::now()).expect("send");
        guard.unlock().expect("unlock");
    });
    // The waiter's subscription is asked for with a poke the frozen connection never delivers:
    // once the poke has gone unanswered for the response timeout, the backend gives that
    // connection up, and its new one subscribes the channel.
    server.await_subscriber("redisson_lock__channel:{stall:x}");
    let released = Instant::now();
    held.unlock().expect("unlock");
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter got the lock");
    assert!(
        acquired.duration_since(released) < Duration::from_secs(5),
        "woken by the release ({:?} after it), not by the end of the {lease:?} lease",
        acquired.duration_since(released)
    );
    waiter.join().expect("waiter");
    drop(first);
}

/// The client's wait queue on Redis: a subscription that takes 2 s (the fault layer's delay)
/// holds up nothing else on the lock or on another one (see `support::wait_queue`).
#[test]
fn a_slow_subscription_blocks_nothing_else_on_redis() {
    let server = RedisServer::start();
    support::wait_queue::a_slow_subscription_blocks_nothing_else(std::sync::Arc::new(
        server.backend(),
    ));
}
