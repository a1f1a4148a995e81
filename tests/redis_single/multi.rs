//! A multi-lock whose members live on two Redis servers and the in-process store (the
//! case shared with PostgreSQL, `dlock_test_support::server_cases::multi`).

#![cfg(feature = "redis")]

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::multi;
use dlocks::{LockClient, MemoryBackend};

#[test]
fn members_on_two_servers_and_in_memory_are_taken_all_or_none_without_deadlock() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let memory = MemoryBackend::new();
    // Each thread is a service with its own clients on the three stores.
    multi::members_on_several_stores_are_taken_all_or_none_without_deadlock(
        || {
            vec![
                LockClient::new(one.backend()),
                LockClient::new(two.backend()),
                LockClient::new(memory.clone()),
            ]
        },
        &["orders", "ledger", "cache"],
        1000,
    );
}
