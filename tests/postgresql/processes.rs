//! Several OS processes on one PostgreSQL server: a killed holder's lock is freed by its lease,
//! and four processes of four threads incrementing a counter under one lock lose no update (the
//! cases shared with Redis, `dlock_test_support::server_cases::processes`).
//!
//! The other processes are this test binary run again with `DLOCK_HELPER` set: the `helper`
//! test below then plays the role it names instead of returning at once.

#![cfg(feature = "postgres")]

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::processes;

const THREADS: usize = 4;
const INCREMENTS_PER_THREAD: i64 = 20;

#[test]
fn helper() {
    processes::helper::<PostgresServer>(THREADS, INCREMENTS_PER_THREAD);
}

#[test]
fn a_lock_held_by_a_killed_process_is_taken_after_its_lease() {
    processes::a_lock_held_by_a_killed_process_is_taken_after_its_lease::<PostgresServer>(
        module_path!(),
    );
}

#[test]
fn four_processes_of_four_threads_lose_no_update() {
    processes::processes_of_threads_lose_no_update::<PostgresServer>(
        module_path!(),
        4,
        THREADS,
        INCREMENTS_PER_THREAD,
    );
}
