//! A multi-lock whose members live on two Redis servers and the in-process store.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::thread;
use std::time::Duration;

use dlocks::{LockClient, MemoryBackend, MultiLock};
use support::redis_server::RedisServer;

#[test]
fn members_on_two_servers_and_in_memory_are_taken_all_or_none_without_deadlock() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let memory = MemoryBackend::new();
    // Each thread is a service with its own clients on the three stores.
    let service = || {
        (
            LockClient::new(one.backend()),
            LockClient::new(two.backend()),
            LockClient::new(memory.clone()),
        )
    };
    let (a, b, c) = service();
    let set = MultiLock::new([a.lock("orders"), b.lock("ledger"), c.lock("cache")]);
    let guard = set.lock().expect("all three");
    let (x, y, z) = service();
    assert!(x.lock("orders").try_lock().expect("try").is_none());
    assert!(y.lock("ledger").try_lock().expect("try").is_none());
    assert!(z.lock("cache").try_lock().expect("try").is_none());
    // Another set sharing one member waits for all, and keeps nothing meanwhile.
    let theirs = MultiLock::new([z.lock("cache"), x.lock("other")]);
    assert!(theirs
        .try_lock_for(Duration::from_millis(50))
        .expect("try")
        .is_none());
    assert!(
        !a.lock("other").is_locked().expect("status"),
        "nothing kept while waiting"
    );
    guard.unlock().expect("unlock all three");
    assert!(theirs.try_lock().expect("try").is_some());

    // Two threads taking the same set across the stores in opposite orders, 1000 times each.
    thread::scope(|s| {
        for reversed in [false, true] {
            let (a, b, c) = service();
            s.spawn(move || {
                let mut members = vec![a.lock("x"), b.lock("y"), c.lock("z")];
                if reversed {
                    members.reverse();
                }
                let set = MultiLock::new(members);
                for _ in 0..1000 {
                    set.lock().expect("lock").unlock().expect("unlock");
                }
            });
        }
    });
}
