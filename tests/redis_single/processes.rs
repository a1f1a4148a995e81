//! Several OS processes on one server: a killed holder's lock is freed by its lease, and
//! 8 processes × 8 threads incrementing a counter under one lock lose no update (the cases
//! shared with PostgreSQL, `dlock_test_support::server_cases::processes`).
//!
//! The other processes are this test binary run again with `DLOCK_HELPER` set: the `helper`
//! test below then plays the role it names instead of returning at once.

#![cfg(feature = "redis")]

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::processes;

const THREADS: usize = 8;
const INCREMENTS_PER_THREAD: i64 = 25;

#[test]
fn helper() {
    processes::helper::<RedisServer>(THREADS, INCREMENTS_PER_THREAD);
}

#[test]
fn a_lock_held_by_a_killed_process_is_taken_after_its_lease() {
    processes::a_lock_held_by_a_killed_process_is_taken_after_its_lease::<RedisServer>(
        module_path!(),
    );
}

#[test]
fn eight_processes_of_eight_threads_lose_no_update() {
    processes::processes_of_threads_lose_no_update::<RedisServer>(
        module_path!(),
        8,
        THREADS,
        INCREMENTS_PER_THREAD,
    );
}
