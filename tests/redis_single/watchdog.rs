//! The watchdog on Redis: all of a client's holds renewed together, one script per tick.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::backend::{AcquireRequest, DistributedLock, HoldRef, LockRef, OwnerId, Renewal};
use dlocks::LockClientBuilder;

use crate::evalsha_calls;
use support::redis_server::RedisServer;

#[test]
fn one_renewal_script_per_tick_covers_every_hold() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    // The client's record is refreshed by a script of its own, on its own schedule: left out
    // here, where every EVALSHA is counted.
    let client = LockClientBuilder::new(std::sync::Arc::new(server.backend()))
        .watchdog_lease(lease)
        .client_record(false)
        .build()
        .expect("client");
    let names = ["wd:a", "wd:b", "wd:c", "wd:d"];
    let locks: Vec<_> = names.iter().map(|name| client.lock(*name)).collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|lock| lock.lock().expect("lock"))
        .collect();

    let mut admin = server.admin();
    // Let one tick load the renewal script, so NOSCRIPT retries do not count below.
    std::thread::sleep(lease / 2);
    let stats_before = client.watchdog_stats();
    let calls_before = evalsha_calls(&mut admin);
    // Three leases' worth: the holds live only if the watchdog renews them.
    std::thread::sleep(lease * 3);
    let calls_after = evalsha_calls(&mut admin);
    let stats_after = client.watchdog_stats();

    let batches = stats_after.batches - stats_before.batches;
    assert!(batches >= 3, "the watchdog ran: {batches} batches");
    // No other command ran meanwhile: each tick was exactly one EVALSHA for all four holds.
    let calls = u64::try_from(calls_after - calls_before).expect("non-negative");
    assert!(
        calls == batches || calls == batches + 1 || calls + 1 == batches,
        "{calls} EVALSHA calls for {batches} batches (a tick may straddle a reading)"
    );
    assert!(stats_after.renewed - stats_before.renewed >= batches * 4 - 4);
    for (lock, guard) in locks.iter().zip(&guards) {
        assert!(!guard.is_lost());
        assert!(lock.is_held_by_current_thread().expect("held"));
    }
    drop(guards);
}

#[test]
fn a_big_batch_is_one_call_of_pipelined_chunks_and_never_resurrects() {
    let server = RedisServer::start();
    let backend = server.backend();
    let owner = OwnerId::from_raw("bulk-client:1");
    let lease = Duration::from_secs(30);
    let names: Vec<String> = (0..1100).map(|i| format!("bulk:{i}")).collect();
    for name in &names[..1000] {
        let request = AcquireRequest::new(LockRef::reentrant(name), &owner, lease);
        assert!(backend
            .try_acquire(&request)
            .expect("acquire")
            .is_acquired());
    }
    let holds: Vec<HoldRef<'_>> = names
        .iter()
        .map(|name| HoldRef {
            lock: LockRef::reentrant(name),
            owner: &owner,
        })
        .collect();
    // Load the renewal script first, so NOSCRIPT retries do not count below.
    backend.renew(&holds[..1], lease).expect("renew");
    let mut admin = server.admin();
    let before = evalsha_calls(&mut admin);
    let renewed = backend
        .renew(&holds, Duration::from_secs(60))
        .expect("renew");
    let after = evalsha_calls(&mut admin);

    assert_eq!(renewed.len(), 1100);
    assert!(renewed[..1000].iter().all(|r| *r == Renewal::Renewed));
    assert!(
        renewed[1000..]
            .iter()
            .all(|r| matches!(r, Renewal::Lost(_))),
        "missing locks are reported gone"
    );
    assert_eq!(
        after - before,
        3,
        "1100 holds = 3 scripts of at most 500, sent in one pipeline"
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg("bulk:999")
        .query(&mut admin)
        .expect("PTTL");
    assert!(pttl > 30_000, "renewed to the new lease: {pttl}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg("bulk:1050")
        .query(&mut admin)
        .expect("EXISTS");
    assert_eq!(exists, 0, "a gone lock is not brought back");
}
