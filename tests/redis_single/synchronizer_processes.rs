//! Semaphores and leader elections across OS processes on one real Redis server (the cases
//! shared with PostgreSQL, `dlock_test_support::server_cases::synchronizer_processes`).

#![cfg(feature = "redis")]

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::synchronizer_processes as cases;

#[test]
fn helper() {
    cases::helper::<RedisServer>();
}

#[test]
fn six_processes_never_hold_more_permits_than_the_semaphore_has() {
    cases::six_processes_never_hold_more_permits_than_the_semaphore_has::<RedisServer>(
        module_path!(),
    );
}

#[test]
fn a_permit_held_by_a_killed_process_comes_back_within_its_lease() {
    cases::a_permit_held_by_a_killed_process_comes_back_within_its_lease::<RedisServer>(
        module_path!(),
    );
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease_by_a_higher_token() {
    cases::a_killed_leader_is_replaced_within_its_lease_by_a_higher_token::<RedisServer>(
        module_path!(),
    );
}
