//! The unlock latch: an unlock whose reply was lost is sent again and replays the first answer
//! instead of acting twice; and latches are deleted once the answer is in hand (with the
//! connection's next command), or expire, leaving no garbage keys behind.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::{Duration, Instant};

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockError};
use support::redis_server::RedisServer;
use support::tcp_proxy::TcpProxy;

fn keys(admin: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(admin)
            .expect("SCAN");
        found.extend(batch);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

#[test]
fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port());
    let backend = RedisBackend::builder(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .build()
        .expect("backend through the proxy");
    let client = LockClient::new(backend);
    let lock = client.lock("latch:lost-reply");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");

    // The release script runs on the server, and the connection is cut before its reply comes
    // back. The backend sends the same request again on a new connection: without the latch
    // it would find the lock already gone and report the lease lost.
    proxy.cut_reply_to("redisson_unlock_latch");
    guard
        .unlock()
        .expect("the retried unlock replays the first answer");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");

    let mut admin = server.admin();
    assert!(!lock.is_locked().expect("status"), "released once");
    // The latch, no longer needed once the answer arrived, goes with the next command sent to
    // the server, on whichever pooled connection; until then it carries an expiry of a few
    // response timeouts.
    for latch in keys(&mut admin, "redisson_unlock_latch:*") {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&latch)
            .query(&mut admin)
            .expect("PTTL");
        assert!((1..=6_000).contains(&ttl), "{latch}: PTTL {ttl}");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let other = client.lock("latch:next");
    while !keys(&mut admin, "redisson_unlock_latch:{latch:lost-reply}*").is_empty() {
        assert!(Instant::now() < deadline, "the latch was never deleted");
        assert!(other.try_lock().expect("try_lock").is_some());
    }
}

#[test]
fn a_release_that_found_nothing_is_not_latched() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.lock("latch:nothing");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    assert!(lock.force_unlock().expect("force"));
    let error = guard.unlock().expect_err("nothing to release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    let mut admin = server.admin();
    assert!(keys(&mut admin, "redisson_unlock_latch:*").is_empty());
}

#[test]
fn two_hundred_pairs_on_distinct_names_leave_no_garbage() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder(&server.url())
        .pool_size(2)
        .build()
        .expect("backend");
    let client = LockClient::new(backend);
    for i in 0..200 {
        client
            .lock(format!("garbage:{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
    }
    // Each latch goes with its connection's next command: at most the last one of each
    // pooled connection is still waiting for it.
    let mut admin = server.admin();
    let left = keys(&mut admin, "*");
    assert!(
        left.len() <= 2
            && left
                .iter()
                .all(|key| key.starts_with("redisson_unlock_latch:")),
        "{} keys left after the last unlock: {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
}

/// A string under a synchronizer's name that is not a count (another program's key) is the
/// name in use as something else: `WrongKind` from every step, and the key left as it was.
#[test]
fn a_string_that_is_not_a_count_is_the_wrong_kind_for_every_synchronizer() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut admin = server.admin();
    let () = redis::cmd("SET")
        .arg("foreign")
        .arg("hello")
        .query(&mut admin)
        .expect("SET");
    let wrong = |result: Result<(), dlocks::LockError>, what: &str| {
        assert!(
            matches!(result, Err(dlocks::LockError::WrongKind { .. })),
            "{what}: {result:?}"
        );
    };
    let latch = client.count_down_latch("foreign");
    wrong(latch.count().map(drop), "count");
    wrong(latch.try_set_count(2).map(drop), "try_set_count");
    wrong(latch.count_down(), "count_down");
    wrong(latch.wait_for(Duration::ZERO).map(drop), "wait_for");
    let semaphore = client.semaphore("foreign");
    wrong(semaphore.try_set_permits(1).map(drop), "try_set_permits");
    wrong(semaphore.add_permits(1), "add_permits");
    wrong(semaphore.available_permits().map(drop), "available_permits");
    wrong(semaphore.try_acquire().map(drop), "try_acquire");
    wrong(client.lock("foreign").try_lock().map(drop), "a lock");
    wrong(
        client
            .leader_election("foreign")
            .try_campaign_for("x", Duration::ZERO)
            .map(drop),
        "a campaign",
    );
    let kept: String = redis::cmd("GET")
        .arg("foreign")
        .query(&mut admin)
        .expect("GET");
    assert_eq!(kept, "hello");
}
