//! A multi-lock whose members live on PostgreSQL and on Redis: taken all or none, waited for
//! member by member, lost as a whole when one member is, without deadlock between sets taken in
//! opposite orders.

#![cfg(all(feature = "postgres", feature = "redis"))]

use dlock_test_support as support;

use std::thread;
use std::time::Duration;

use dlocks::{LockClient, MultiLock};
use support::postgres_server::PostgresServer;
use support::redis_server::RedisServer;

#[test]
fn members_on_postgres_and_redis_are_taken_all_or_none_without_deadlock() {
    let (pg, redis) = (PostgresServer::start(), RedisServer::start());
    // Each thread is a service with its own clients on the two stores.
    let service = || {
        (
            LockClient::new(pg.backend()),
            LockClient::new(redis.backend()),
        )
    };
    let (a, b) = service();
    let set = MultiLock::new([a.lock("orders"), b.lock("ledger")]);
    let guard = set.lock().expect("both");
    let (x, y) = service();
    assert!(x.lock("orders").try_lock().expect("try").is_none());
    assert!(y.lock("ledger").try_lock().expect("try").is_none());
    // Another set sharing one member waits for all, and keeps nothing meanwhile.
    let theirs = MultiLock::new([y.lock("ledger"), x.lock("other")]);
    assert!(theirs
        .try_lock_for(Duration::from_millis(50))
        .expect("try")
        .is_none());
    assert!(
        !a.lock("other").is_locked().expect("status"),
        "nothing kept while waiting"
    );
    guard.unlock().expect("unlock both");
    theirs
        .try_lock()
        .expect("try")
        .expect("free now")
        .unlock()
        .expect("unlock");

    // A member force-unlocked on PostgreSQL loses the set; unlock still releases the rest.
    let guard = set.lock().expect("both again");
    assert!(x.lock("orders").force_unlock().expect("force"));
    assert!(guard.unlock().is_err(), "a lost member is reported");
    assert!(
        !y.lock("ledger").is_locked().expect("status"),
        "the Redis member was released"
    );

    // Two threads taking one set across the stores in opposite orders.
    thread::scope(|s| {
        for reversed in [false, true] {
            let (a, b) = service();
            s.spawn(move || {
                let mut members = vec![a.lock("x"), b.lock("y")];
                if reversed {
                    members.reverse();
                }
                let set = MultiLock::new(members);
                for _ in 0..200 {
                    set.lock().expect("lock").unlock().expect("unlock");
                }
            });
        }
    });
}
