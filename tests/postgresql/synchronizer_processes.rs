//! Semaphores and leader elections across OS processes on one real PostgreSQL server (the cases
//! shared with Redis, `dlock_test_support::server_cases::synchronizer_processes`).

#![cfg(feature = "postgres")]

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::synchronizer_processes as cases;

#[test]
fn helper() {
    cases::helper::<PostgresServer>();
}

#[test]
fn six_processes_never_hold_more_permits_than_the_semaphore_has() {
    cases::six_processes_never_hold_more_permits_than_the_semaphore_has::<PostgresServer>(
        module_path!(),
    );
}

#[test]
fn a_permit_held_by_a_killed_process_comes_back_within_its_lease() {
    cases::a_permit_held_by_a_killed_process_comes_back_within_its_lease::<PostgresServer>(
        module_path!(),
    );
}

#[test]
fn a_killed_leader_is_replaced_within_its_lease_by_a_higher_token() {
    cases::a_killed_leader_is_replaced_within_its_lease_by_a_higher_token::<PostgresServer>(
        module_path!(),
    );
}
