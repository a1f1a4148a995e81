//! The lease rule and exclusion, checked after every step of random operation sequences on a
//! real PostgreSQL server through a network that holds requests back and delivers them late or
//! in reverse, and holds back the server's notifications (a TCP proxy in front of the server);
//! and the server held to the protocol model answer by answer. See `support::lease_model`;
//! `DLOCK_MODEL_SEED=<seed>` replays one sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

#![cfg(feature = "postgres")]

dlock_test_support::lease_model_suite!(dlock_test_support::postgres_server::PostgresServer);
