//! dlock on real PostgreSQL servers, one (or two) per test: the suites every backend runs
//! through its harness (`PostgresServer`), and what is PostgreSQL's own: the schema, latches,
//! faults of sessions, failover, TLS, and multi-locks across PostgreSQL and Redis.

mod abandoned_steps;
mod failover;
mod faults;
mod fenced_writes;
mod grant_proofs;
mod multi;
mod purge;
mod read_renewals;
mod read_write_wake_ups;
mod release_records;
mod retried_steps;
mod runtime;
mod schema;
mod tls;
mod wake_ups;

use dlock_test_support::postgres_server::PostgresServer;

/// The conformance suite: every lock kind and every synchronizer.
mod conformance {
    dlock_test_support::conformance_suite!(server super::PostgresServer);
}

/// The async surface.
#[cfg(feature = "async")]
mod async_surface {
    dlock_test_support::async_suite!(server super::PostgresServer);
}

/// The lease model and the differential test, through a faulty network.
mod lease_model {
    dlock_test_support::lease_model_suite!(super::PostgresServer);
}

dlock_test_support::server_suite!(PostgresServer);
dlock_test_support::forged_grants_suite!(PostgresServer);
dlock_test_support::fenced_writes_suite!(PostgresServer);
