//! The conformance suite on a real PostgreSQL server (one per test, started by the harness).

#![cfg(feature = "postgres")]

mod conformance;
mod support;

conformance_suite!(support::postgres_server::PostgresEnv::start);
