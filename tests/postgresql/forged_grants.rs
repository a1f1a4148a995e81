//! A forged fair-lock grant, sent with `NOTIFY` (which any role may) by a session that listened
//! to a real one, is not believed (the case shared with Redis,
//! `dlock_test_support::server_cases::forged_grants`).

#![cfg(feature = "postgres")]

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::forged_grants;

#[test]
fn a_forged_grant_is_not_believed() {
    forged_grants::a_forged_grant_is_not_believed::<PostgresServer>();
}
