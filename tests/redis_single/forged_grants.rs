//! A forged fair-lock grant, published on the waiter's channel by a client that listened to a
//! real one, is not believed (the case shared with PostgreSQL,
//! `dlock_test_support::server_cases::forged_grants`).

#![cfg(feature = "redis")]

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::forged_grants;

#[test]
fn a_forged_grant_is_not_believed() {
    forged_grants::a_forged_grant_is_not_believed::<RedisServer>();
}
