//! Fencing tokens on Redis: Redisson's counter key, tokens that keep increasing across a
//! restart that lost the data and past a counter that is behind, and tokens shared with
//! Redisson's `RFencedLock`.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::LockClient;
use support::redis_server::RedisServer;
use support::redisson::Redisson;

#[test]
fn the_token_is_redissons_counter_key() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let guard = client.fenced_lock("ledger").lock().expect("lock");
    let mut admin = server.admin();
    let stored: u64 = redis::cmd("GET")
        .arg("redisson_lock_token:{ledger}")
        .query(&mut admin)
        .expect("GET");
    assert_eq!(stored, guard.token());
    let ttl: i64 = redis::cmd("PTTL")
        .arg("redisson_lock_token:{ledger}")
        .query(&mut admin)
        .expect("PTTL");
    assert_eq!(ttl, -1, "the counter never expires");
    guard.unlock().expect("unlock");
}

#[test]
fn tokens_keep_increasing_across_a_restart_that_lost_the_counter() {
    let mut server = RedisServer::start();
    let first = {
        let client = LockClient::new(server.backend());
        let guard = client.fenced_lock("ledger").lock().expect("lock");
        let token = guard.token();
        guard.unlock().expect("unlock");
        token
    };
    server.restart(); // no persistence: the counter is gone
    let client = LockClient::new(server.backend());
    let guard = client
        .fenced_lock("ledger")
        .lock()
        .expect("lock after the restart");
    assert!(
        guard.token() > first,
        "a counter started again from the server's clock: {} after {first}",
        guard.token()
    );
    guard.unlock().expect("unlock");
}

#[test]
fn tokens_keep_increasing_when_the_counter_is_behind() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.fenced_lock("ledger:behind");
    let first = lock.lock().expect("lock").token();
    // As after a failover to a replica that missed the last increments.
    let () = redis::cmd("SET")
        .arg("redisson_lock_token:{ledger:behind}")
        .arg(7)
        .query(&mut server.admin())
        .expect("SET");
    let mut last = first;
    for _ in 0..3 {
        let token = lock.lock().expect("lock").token();
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[test]
fn redisson_and_dlock_draw_from_one_token_counter() {
    let server = RedisServer::start();
    let mut java = Redisson::new(&server);
    let client = LockClient::new(server.backend());
    let lease = Duration::from_secs(30);
    let dlock_first = client.fenced_lock("shared:ledger").lock().expect("lock");
    let t1 = dlock_first.token();
    assert!(
        java.fenced_try_lock("shared:ledger", lease).is_err(),
        "dlock holds it"
    );
    dlock_first.unlock().expect("unlock");
    let t2 = java
        .fenced_try_lock("shared:ledger", lease)
        .expect("Redisson takes it");
    assert!(t2 as u64 > t1, "Redisson's token {t2} after dlock's {t1}");
    assert!(client
        .fenced_lock("shared:ledger")
        .try_lock()
        .expect("try")
        .is_none());
    assert_eq!(java.unlock("shared:ledger"), Some(1));
    let t3 = client
        .fenced_lock("shared:ledger")
        .lock()
        .expect("lock")
        .token();
    assert!(t3 > t2 as u64, "dlock's token {t3} after Redisson's {t2}");
}
