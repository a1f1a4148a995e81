//! The async surface on a real PostgreSQL server (one per test, started by the harness).

#![cfg(all(feature = "postgres", feature = "async"))]

dlock_test_support::async_suite!(dlock_test_support::postgres_server::PostgresEnv::start);
