//! The lease rule and exclusion, checked after every step of random operation sequences (see
//! `dlock_test_support::lease_model`): on the in-process backend, and what Redis adds to the
//! runs every server backend makes through its test binary's `lease_model_suite!` line.
//! `DLOCK_MODEL_SEED=<seed>` replays one sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

mod memory;
mod redis;
