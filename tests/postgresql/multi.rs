//! A multi-lock whose members live on PostgreSQL and on Redis: taken all or none, waited for
//! member by member, lost as a whole when one member is, without deadlock between sets taken in
//! opposite orders (the case of `dlock_test_support::server_cases::multi` that `server_suite!`
//! runs on two servers of one backend, here across two backends).

#![cfg(all(feature = "postgres", feature = "redis"))]

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::multi;
use dlocks::LockClient;

#[test]
fn members_on_postgres_and_redis_are_taken_all_or_none_without_deadlock() {
    let (pg, redis) = (PostgresServer::start(), RedisServer::start());
    // Each thread is a service with its own clients on the two stores.
    multi::members_on_several_stores_are_taken_all_or_none_without_deadlock(
        || {
            vec![
                LockClient::new(pg.backend()),
                LockClient::new(redis.backend()),
            ]
        },
        &["orders", "ledger"],
        200,
    );
}
