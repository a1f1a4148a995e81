//! The raw Redis layout of a dlock lock, read with a plain connection: Redisson's hash, lease,
//! channel and unlock latch.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::collections::HashMap;
use std::time::Duration;

use dlocks::redis::{channel_name, unlock_latch_name, RedisBackend};
use dlocks::LockClient;
use support::redis_server::RedisServer;

use crate::evalsha_calls;

/// A client that keeps no record in the store: these tests read every key and command a lock
/// step leaves on the server, and a client's record is neither.
fn quiet_client(backend: dlocks::redis::RedisBackend) -> LockClient {
    LockClient::builder(backend)
        .client_record(false)
        .build()
        .expect("client")
}

#[test]
fn a_held_lock_is_a_hash_of_owner_to_count_with_a_lease() {
    let server = RedisServer::start();
    let client = quiet_client(server.backend());
    let lock = client.lock("layout:orders");
    let guard = lock.lock_with_lease(Duration::from_secs(20)).expect("lock");
    let mut admin = server.admin();

    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("layout:orders")
        .query(&mut admin)
        .expect("HGETALL");
    let owner = guard.owner().to_owned();
    assert_eq!(
        fields,
        HashMap::from([
            (owner.clone(), "1".to_owned()),
            ("mode".to_owned(), "lock".to_owned())
        ]),
        "field <client uuid>:<hold number> = hold count, and the kind's mark"
    );
    let (uuid, hold) = owner
        .rsplit_once(':')
        .expect("a hold id is <uuid>:<hold number>");
    assert_eq!(uuid, client.id());
    assert!(hold.parse::<u64>().is_ok());

    let pttl: i64 = redis::cmd("PTTL")
        .arg("layout:orders")
        .query(&mut admin)
        .expect("PTTL");
    assert!(
        pttl > 15_000 && pttl <= 20_000,
        "PEXPIRE set to the lease, got {pttl} ms"
    );
    let kind: String = redis::cmd("TYPE")
        .arg("layout:orders")
        .query(&mut admin)
        .expect("TYPE");
    assert_eq!(kind, "hash");

    guard.unlock().expect("unlock");
    let exists: i64 = redis::cmd("EXISTS")
        .arg("layout:orders")
        .query(&mut admin)
        .expect("EXISTS");
    assert_eq!(exists, 0, "a release deletes the hash");
}

#[test]
fn channel_and_latch_names_follow_redissons_prefix_rule() {
    assert_eq!(channel_name("orders"), "redisson_lock__channel:{orders}");
    assert_eq!(channel_name("a{b}c"), "redisson_lock__channel:a{b}c");
    assert_eq!(
        unlock_latch_name("orders", "req"),
        "redisson_unlock_latch:{orders}:req"
    );
    assert_eq!(
        unlock_latch_name("{tag}x", "req"),
        "redisson_unlock_latch:{tag}x:req"
    );
}

#[test]
fn a_release_publishes_0_on_the_channel_and_its_latch_goes_with_the_next_command() {
    let server = RedisServer::start();
    // One pooled connection, so that the next step goes where the release went.
    let backend = RedisBackend::builder(&server.url())
        .pool_size(1)
        .build()
        .expect("backend");
    let client = quiet_client(backend);
    let lock = client.lock("layout:channel");

    let mut sub_con = server.admin();
    let mut pubsub = sub_con.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{layout:channel}")
        .expect("SUBSCRIBE");
    let mut monitor = server.admin();
    let _: String = redis::cmd("MONITOR").query(&mut monitor).expect("MONITOR");

    let guard = lock.lock().expect("lock");
    guard.unlock().expect("unlock");
    let message = pubsub.get_message().expect("the release is announced");
    assert_eq!(
        message.get_channel_name(),
        "redisson_lock__channel:{layout:channel}"
    );
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");
    drop(pubsub);
    let mut admin = server.admin();
    let latches = |admin: &mut redis::Connection| -> Vec<String> {
        redis::cmd("KEYS")
            .arg("redisson_unlock_latch:*")
            .query(admin)
            .expect("KEYS")
    };
    let left = latches(&mut admin);
    assert_eq!(left.len(), 1, "the release's latch: {left:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&left[0])
        .query(&mut admin)
        .expect("PTTL");
    assert!(ttl > 0, "the latch expires on its own, got PTTL {ttl}");

    // The next step on the connection deletes the latch in the same write, before its script.
    lock.lock()
        .expect("lock again")
        .unlock()
        .expect("unlock again");
    let mut set_latch = None;
    for _ in 0..100 {
        let line = match monitor.recv_response().expect("MONITOR line") {
            redis::Value::SimpleString(line) => line,
            other => format!("{other:?}"),
        };
        if set_latch.is_none() && line.contains("\"set\" \"redisson_unlock_latch:{layout:channel}:")
        {
            assert!(
                line.contains("\"px\""),
                "the latch expires on its own: {line}"
            );
            set_latch = Some(line);
        } else if line.contains("\"DEL\" \"redisson_unlock_latch:{layout:channel}:") {
            let set = set_latch.expect("the latch is set before it is deleted");
            let key = |line: &str| line.split('"').nth(3).map(str::to_owned);
            assert_eq!(key(&line), key(&set), "the same latch: {set} / {line}");
            let left = latches(&mut admin);
            assert!(
                left.len() <= 1 && !left.contains(&key(&set).unwrap_or_default()),
                "the first latch is gone, the second waits for the next command: {left:?}"
            );
            return;
        }
    }
    panic!("the latch was never deleted");
}

#[test]
fn a_reentrant_acquire_costs_no_round_trip() {
    let server = RedisServer::start();
    let client = quiet_client(server.backend());
    let lock = client.lock("layout:reentrant");
    let mut admin = server.admin();
    let outer = lock.lock().expect("lock");
    let before = evalsha_calls(&mut admin);
    let inner = lock.lock().expect("reentrant lock");
    let after = evalsha_calls(&mut admin);
    assert_eq!(
        after, before,
        "re-entering within the lease asks the server nothing"
    );
    drop(inner);
    assert_eq!(
        evalsha_calls(&mut admin),
        before,
        "releasing an inner hold asks nothing either"
    );
    outer.unlock().expect("unlock");
}

#[test]
fn an_uncontended_lock_and_unlock_is_two_round_trips_and_nothing_else() {
    let server = RedisServer::start();
    let client = quiet_client(server.backend());
    let lock = client.lock("layout:two");
    // Warm up (scripts loaded), and let the pool finish opening its connections.
    lock.lock().expect("lock").unlock().expect("unlock");
    std::thread::sleep(Duration::from_millis(300));
    let mut monitor = server.admin();
    let _: String = redis::cmd("MONITOR").query(&mut monitor).expect("MONITOR");
    lock.lock_with_lease(Duration::from_secs(10))
        .expect("lock")
        .unlock()
        .expect("unlock");
    let mut admin = server.admin();
    let _: String = redis::cmd("ECHO")
        .arg("end-of-pair")
        .query(&mut admin)
        .expect("ECHO");
    // Every command a client sent (the scripts' own commands are marked `lua`), up to the marker.
    let mut sent = Vec::new();
    loop {
        let line = match monitor.recv_response().expect("MONITOR line") {
            redis::Value::SimpleString(line) => line,
            other => panic!("unexpected MONITOR output {other:?}"),
        };
        if line.contains("end-of-pair") {
            break;
        }
        if !line.contains(" lua]") {
            let command = line
                .split('"')
                .nth(1)
                .unwrap_or_default()
                .to_ascii_uppercase();
            sent.push(command);
        }
    }
    // The replica count is read again once a second, by a ROLE riding in a step's pipeline.
    let roles = sent.iter().filter(|command| *command == "ROLE").count();
    assert!(roles <= 1, "{sent:?}");
    sent.retain(|command| command != "ROLE");
    // A release's latch is deleted by a DEL written in front of its connection's next
    // command: here, the warm-up's, if the pair ran on the warm-up's connection.
    let dels = sent.iter().filter(|command| *command == "DEL").count();
    assert!(dels <= 1, "{sent:?}");
    sent.retain(|command| command != "DEL");
    assert_eq!(
        sent,
        ["EVALSHA", "EVALSHA"],
        "one EVALSHA to acquire, one to release (its answer ends the caller's wait); no PING on \
         checkout, nothing else"
    );
}
