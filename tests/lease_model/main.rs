//! The lease rule and exclusion, checked after every step of random operation sequences (see
//! `dlock_test_support::lease_model`), on each backend: the in-process one, a real Redis server
//! and a real PostgreSQL server. `DLOCK_MODEL_SEED=<seed>` replays one sequence,
//! `DLOCK_MODEL_SEQUENCES=<n>` runs more.

mod memory;
mod postgres;
mod redis;
