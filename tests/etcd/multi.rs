//! A multi-lock whose members live on etcd and on other stores (Redis, the in-process store):
//! taken all or none, waited for member by member, without deadlock between sets taken in
//! opposite orders (the case every server backend shares,
//! `dlock_test_support::server_cases::multi`).

#![cfg(feature = "redis")]

use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::multi;
use dlocks::{LockClient, MemoryBackend};

#[test]
fn members_on_etcd_redis_and_memory_are_taken_all_or_none_without_deadlock() {
    let (etcd, redis) = (EtcdCluster::single(), RedisServer::start());
    let memory = MemoryBackend::new();
    // Each thread is a service with its own clients on the three stores.
    multi::members_on_several_stores_are_taken_all_or_none_without_deadlock(
        || {
            vec![
                LockClient::new(etcd.backend()),
                LockClient::new(redis.backend()),
                LockClient::new(memory.clone()),
            ]
        },
        &["orders", "ledger", "stock"],
        100,
    );
}
