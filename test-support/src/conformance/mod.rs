//! The conformance suite: every behaviour of the public API that does not depend on the backend,
//! written once and run on each backend by [`conformance_suite!`](crate::conformance_suite).
//!
//! Durations are multiples of [`TestEnv::unit`](crate::env::TestEnv::unit) and time passes only through
//! [`TestEnv::advance`](crate::env::TestEnv::advance), so the same test is exact on a manual clock and real on a real one.

#![allow(dead_code)]
// A binary that instantiates part of the suite leaves some of these unused.
#![allow(unused_imports)]

mod api;
mod backend_contract;
mod bad_input;
mod ended_holds;
mod events;
mod exclusion;
mod fair;
mod fenced;
mod in_runtime;
mod kinds;
mod late_steps;
mod lease_rule;
mod leases;
mod moved_channels;
mod multi;
mod one_kind;
mod read_write;
mod reentrancy;
mod synchronizers;
mod turns;
mod waiting;
mod watchdog;

pub use api::*;
pub use backend_contract::*;
pub use bad_input::*;
pub use ended_holds::*;
pub use events::*;
pub use exclusion::*;
pub use fair::*;
pub use fenced::*;
pub use in_runtime::*;
pub use kinds::*;
pub use late_steps::*;
pub use lease_rule::*;
pub use leases::*;
pub use moved_channels::*;
pub use multi::*;
pub use one_kind::*;
pub use read_write::*;
pub use reentrancy::*;
pub use synchronizers::*;
pub use turns::*;
pub use waiting::*;
pub use watchdog::*;

/// Instantiates every conformance test for the environment made by `$make_env`
/// (a path to a `fn() -> impl TestEnv`), or, written `server $server`, by a server harness's
/// [`ServerEnv::conformance_env`](crate::server_cases::ServerEnv::conformance_env); with `reentrant_only`, the tests of the fair and
/// read-write locks are left out (for backends that keep the reentrant lock alone; the tests
/// of every kind then run on the kinds the backend keeps); with `locks_only`, the tests of the
/// synchronizers (semaphore, latch, election) are left out (for backends that keep every lock
/// kind but not those).
///
/// Written `shared $make_env` (with the same variants), the cases run on one environment made
/// once for each group of them (four tests in all), a few at a time, each failure reported by
/// the case's name: for a topology of several servers, whose start costs seconds, every case
/// still runs on it without a topology of its own per case. The cases hold no state on the
/// store between them (each uses names of its own). The two that keep the CPUs busy (a
/// thousand threads of one client on one lock) are left out there: they show nothing a
/// topology changes, and run on every single-server backend. Written `shared $make_env,
/// replicated`, for a store that replicates every write by consensus, the group under load
/// (thousands of names and holds, threads contending) is left out as well: its cases check
/// the backend's steps, which the store's single-server setup runs, and through consensus they
/// cost every member's CPU.
#[macro_export]
macro_rules! conformance_suite {
    (server $server:ty $(, $variant:ident)?) => {
        /// The conformance suite's environment on the server harness.
        fn conformance_env() -> impl $crate::env::TestEnv {
            <$server as $crate::server_cases::ServerEnv>::conformance_env()
        }
        $crate::conformance_suite!(conformance_env $(, $variant)?);
    };
    (shared $make_env:path) => {
        $crate::conformance_suite!(@every shared $make_env, load);
    };
    (shared $make_env:path, replicated) => {
        $crate::conformance_suite!(@every shared $make_env, no_load);
    };
    (shared $make_env:path, locks_only) => {
        $crate::conformance_suite!(@locks shared $make_env, load);
    };
    (shared $make_env:path, reentrant_only) => {
        $crate::conformance_suite!(@reentrant shared $make_env, load);
    };
    ($make_env:path) => {
        $crate::conformance_suite!(@every tests $make_env, load);
    };
    ($make_env:path, locks_only) => {
        $crate::conformance_suite!(@locks tests $make_env, load);
    };
    ($make_env:path, reentrant_only) => {
        $crate::conformance_suite!(@reentrant tests $make_env, load);
    };
    (@every $mode:ident $make_env:path, $load:ident) => {
        $crate::conformance_suite!(@locks $mode $make_env, $load);
        $crate::conformance_suite!(@group $mode $make_env; synchronizers;
            // synchronizers
            a_semaphore_lets_in_at_most_its_permits,
            a_permit_is_released_from_another_thread,
            a_dead_holders_permit_comes_back_when_its_lease_ends,
            the_watchdog_keeps_a_permit_and_reports_its_loss,
            permit_waiters_of_a_client_are_served_in_arrival_order,
            a_latch_opens_at_zero_and_wakes_its_waiters,
            one_leader_at_a_time_with_increasing_tokens,
            a_cut_off_leader_is_told_before_another_leads,
            an_observer_sees_every_leader_change,
            a_waiting_candidate_leads_as_soon_as_the_leader_resigns,
            dropping_an_elections_changes_ends_the_thread_that_watched,
            latch_counts_are_kept_exactly_up_to_the_largest,
            a_permits_release_delivered_late_gives_nothing_back,
            a_resignation_delivered_late_ends_no_later_leadership,
        );
    };
    (@locks $mode:ident $make_env:path, $load:ident) => {
        $crate::conformance_suite!(@reentrant $mode $make_env, $load);
        $crate::conformance_suite!(@group $mode $make_env; every_lock_kind;
            every_kind_rejects_bad_input,
            a_name_in_use_as_one_kind_refuses_the_others,
            a_multi_lock_of_every_kind_and_bad_sets,
            // fenced lock
            fencing_tokens_increase_with_every_new_hold_and_not_on_reentry,
            fencing_tokens_of_contending_threads_follow_the_order_of_the_holds,
            a_holder_whose_lease_ran_out_is_fenced_off_by_the_next_token,
            // fair lock
            fair_waiters_from_different_clients_get_the_lock_in_arrival_order,
            a_fair_waiter_whose_subscriptions_lapse_is_woken_in_its_turn,
            a_fair_waiter_that_gives_up_leaves_the_queue_at_once,
            a_thread_that_gave_its_guard_away_queues_again_in_turn,
            a_dead_fair_waiter_holds_up_the_queue_only_until_its_place_times_out,
            a_fair_waiter_on_a_lease_of_its_own_claims_its_grant_with_its_lease,
            a_cut_off_fair_waiter_on_a_lease_of_its_own_holds_the_queue_up_only_for_a_grant,
            a_fair_release_wakes_the_head_not_the_queue,
            plain_locks_of_queueing_clients_are_granted_in_arrival_order,
            // read-write lock
            readers_share_and_a_writer_excludes_them,
            a_waiting_writer_is_woken_by_the_last_reader_only,
            a_writer_whose_answer_was_lost_leaves_no_mark_behind,
            waiting_readers_are_all_woken_when_the_writer_leaves,
            a_writer_may_read_and_a_reader_may_not_upgrade,
            read_and_write_holds_are_renewed_in_one_batch,
            a_dead_readers_share_ends_with_its_own_lease,
            forcing_a_dead_writer_open_leaves_the_readers_admitted_since,
            a_waiting_writer_holds_new_readers_off,
            a_writer_that_gives_up_lets_the_readers_in,
            a_dead_waiting_writer_holds_readers_off_only_for_its_slot,
            a_reader_that_comes_in_by_an_extend_leaves_no_mark_behind,
            a_waiter_gives_up_after_its_name_became_another_kind,
            readers_that_waited_behind_a_writer_go_before_the_next_writer,
            a_reader_queued_behind_its_clients_reader_leaves_no_mark_behind,
            // owned guards
            an_owned_fenced_guard_carries_its_token,
            // plain locks' waiters and writers in turn
            a_plain_waiter_takes_the_free_lock_before_a_newcomer,
            a_hand_off_within_a_client_waits_for_an_earlier_waiter,
            a_plain_waiter_that_gives_up_hands_its_turn_on_at_once,
            a_dead_plain_waiter_holds_a_free_lock_up_only_while_its_mark_lives,
            a_writer_takes_the_free_lock_before_a_newcomer,
            a_writer_that_gives_up_hands_its_turn_on_at_once,
            a_dead_writer_holds_a_free_lock_up_only_while_its_mark_lives,
        );
    };
    (@reentrant $mode:ident $make_env:path, $load:ident) => {
        // The two that keep the CPUs busy (a thousand threads): tests of their own, and on a
        // single server only (a crowd of one client's threads on one lock: the topology
        // behind the store changes nothing of what they show).
        $crate::conformance_suite!(@busy $mode $make_env);
        $crate::conformance_suite!(@under_load $load $mode $make_env);
        $crate::conformance_suite!(@group $mode $make_env; reentrant_lock;
            // api
            uncontended_lock_and_release,
            try_lock_is_none_while_another_owner_holds,
            lock_excludes_across_clients_and_threads,
            remaining_lease_reports_the_holders_lease,
            force_unlock_frees_and_wakes,
            explicit_unlock_reports_success,
            leaked_guard_is_released_by_lock_unlock,
            // exclusion
            clients_lose_no_update_under_the_lock,
            // reentrancy
            reentrant_holds_release_at_the_last,
            another_thread_cannot_release,
            hold_counts_are_per_thread,
            reentrant_try_lock_succeeds_without_waiting,
            reentrant_longer_lease_extends_the_hold,
            // leases
            fixed_lease_expires_and_a_waiter_gets_it,
            unlock_after_expiry_is_an_error_and_spares_the_new_holder,
            dead_holder_is_replaced_after_its_lease,
            // waiting
            waiter_wakes_on_release_without_time_passing,
            try_lock_for_times_out,
            zero_wait_is_a_single_try,
            a_waiter_rides_out_a_store_that_stops_answering_within_its_wait,
            a_wait_without_a_bound_returns_the_error_of_a_store_silent_for_a_lease,
            a_first_try_the_store_does_not_answer_is_made_again_within_the_wait,
            a_waiter_whose_subscriptions_lapse_is_woken_by_the_release,
            a_release_before_the_waiters_subscription_wakes_it,
            // watchdog
            watchdog_keeps_a_long_hold_alive,
            dropping_the_guard_stops_renewal,
            one_renewal_thread_batches_all_holds_per_tick,
            renewal_finding_the_lock_gone_marks_the_guard_lost,
            renewal_never_resurrects_a_released_lock,
            // bad input
            empty_and_oversized_names_are_rejected,
            zero_and_huge_durations_are_rejected,
            bad_client_settings_are_rejected,
            // lease events
            a_fixed_lease_running_out_while_held_is_reported,
            a_force_unlocked_hold_is_reported_at_the_next_renewal,
            a_hold_taken_over_by_another_owner_is_reported,
            lease_events_reach_the_callback_and_every_receiver,
            // every kind the backend keeps
            every_exclusive_kind_excludes_reenters_and_releases,
            every_exclusive_kind_expires_and_is_renewed,
            every_exclusive_kind_is_forced_open_and_wakes_its_waiter,
            // multi-lock
            a_multi_lock_takes_every_member_or_none,
            a_multi_lock_waits_for_a_held_member_within_its_bound,
            a_lost_member_loses_the_set_and_unlock_still_releases_the_rest,
            // owned guards (every backend)
            an_owned_guard_is_not_reentrant_and_is_released_from_another_thread,
            // the lease rule
            a_reentry_on_another_lease_never_shortens_the_stores,
            a_late_renewal_never_shortens_a_newer_hold,
            a_failed_extend_is_confirmed_by_the_store_before_the_next_reentry,
            a_multi_lock_renews_a_member_held_on_a_fixed_lease,
            a_multi_lock_of_members_already_held_needs_no_store_call,
            // late and repeated steps, late grants, loss told while a call hangs
            a_release_delivered_late_spares_the_threads_next_hold,
            a_release_sent_twice_spares_the_threads_next_hold,
            releasing_an_expired_hold_spares_the_threads_hold_of_another_kind,
            a_grant_told_after_it_ran_out_is_not_believed,
            a_lease_is_reported_lost_at_its_deadline_while_a_renewal_hangs,
            // an ended hold stays ended; one node's silence stays on that node
            an_extend_never_brings_back_a_force_unlocked_hold,
            an_extend_never_brings_back_a_force_unlocked_fenced_hold,
            a_late_copy_of_an_acquire_never_brings_back_a_force_unlocked_hold,
            a_silent_node_holds_up_no_other_nodes_renewals,
            names_that_would_share_keys_are_refused_for_every_kind,
            // one name, one kind (the pairs of kinds the backend keeps)
            a_thread_using_a_name_as_one_kind_is_refused_every_other_kind,
            two_clients_never_use_one_name_as_two_kinds,
            // backend contract
            backend_acquire_reports_holders_lease,
            backend_release_by_a_stranger_changes_nothing,
            backend_renew_reports_gone_holds,
            backend_subscription_is_notified_on_release,
            backend_waiter_with_the_longest_slot_is_answered,
            // inside an async runtime
            the_blocking_api_works_inside_an_async_runtime,
        );
    };
    // Thousands of names or holds, and threads contending for one lock or one set: a group of
    // their own (a shared setup runs them beside the rest). Not on a replicated store: what
    // they show is the backend's, which a single server shows, and through consensus they
    // cost its members' CPU several times over.
    (@under_load load $mode:ident $make_env:path) => {
        $crate::conformance_suite!(@group $mode $make_env; reentrant_lock_under_load;
            threads_lose_no_update_under_the_lock,
            many_threads_on_thousands_of_names,
            every_exclusive_kind_loses_no_update_under_contention,
            two_threads_taking_one_set_in_opposite_orders_never_deadlock,
            backend_renewal_of_thousands_of_holds_answers_each_in_its_place,
        );
    };
    (@under_load no_load $mode:ident $make_env:path) => {};
    (@busy tests $make_env:path) => {
        $crate::conformance_suite!(@group tests $make_env; busy;
            seed_1000_threads_short_wait_long_lease_exactly_one_acquires,
            seed_100_threads_long_wait_short_lease_all_acquire,
        );
    };
    (@busy shared $make_env:path) => {};
    (@group tests $make_env:path; $group:ident; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                let env = $make_env();
                $crate::conformance::$test(&env);
            }
        )*
    };
    (@group shared $make_env:path; $group:ident; $($test:ident,)*) => {
        #[test]
        fn $group() {
            let env = $make_env();
            $crate::conformance::run_shared(
                &env,
                &[$((stringify!($test), $crate::conformance::$test as $crate::conformance::Case),)*],
            );
        }
    };
}

/// A conformance case.
pub type Case = fn(&dyn crate::env::TestEnv);

/// How many cases of a shared group run at once: most of a case's time is waiting (leases,
/// round trips), as separate tests' is.
const SHARED_AT_ONCE: usize = 3;

/// Runs `cases` on `env`, a few at a time, each to its end whatever the others did; fails with
/// the names of those that failed (each one's message is printed as it fails).
pub fn run_shared(env: &dyn crate::env::TestEnv, cases: &[(&str, Case)]) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..SHARED_AT_ONCE {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, case)) = cases.get(at) else {
                    return;
                };
                let started = std::time::Instant::now();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(env)));
                let took = started.elapsed();
                match outcome {
                    Ok(()) => eprintln!("case {name}: ok ({took:.2?})"),
                    Err(_) => {
                        eprintln!("case {name}: FAILED ({took:.2?})");
                        failed
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(*name);
                    }
                }
            });
        }
    });
    let failed = failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(
        failed.is_empty(),
        "{} of {} cases failed on {}: {failed:?}",
        failed.len(),
        cases.len(),
        env.name()
    );
}

/// Holds the next try of `faulty`'s clients up on its way to the store: the receiver hears
/// when it got there, and the sender lets it go on.
pub(crate) fn hold_up_next_try(
    faulty: &dlocks::testing::FaultyBackend,
) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let armed = AtomicBool::new(true);
    let (arrived_tx, arrived) = std::sync::mpsc::channel();
    let (go, gone) = std::sync::mpsc::channel::<()>();
    let gone = parking_lot::Mutex::new(gone);
    faulty.observe(move |call| {
        if call.op == dlocks::testing::Op::TryAcquire && armed.swap(false, Ordering::SeqCst) {
            let _ = arrived_tx.send(());
            let _ = gone.lock().recv_timeout(std::time::Duration::from_secs(30));
        }
    });
    (arrived, go)
}

/// A lock name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("dlock-test:{prefix}:{}", uuid::Uuid::new_v4())
}

/// A hold (or waiter) id no other test uses, as a client makes them (`<client>:<thread>`), of
/// a client of its own: for the steps a test sends through the backend's own API.
pub fn new_owner() -> dlocks::backend::OwnerId {
    dlocks::backend::OwnerId::from_raw(format!("{}:1", uuid::Uuid::new_v4()))
}

/// Returns once `faulty`'s clients have had `count` calls of `op` answered (a waiter's first
/// refused try, and what it leaves on the store: its place, its mark), then once `sleepers`
/// threads sleep as the environment tells: a waiter slow to make its first step on a loaded
/// machine is waited for, not outrun by a fixed pause.
pub(crate) fn await_answered(
    env: &dyn crate::env::TestEnv,
    faulty: &dlocks::testing::FaultyBackend,
    op: dlocks::testing::Op,
    count: u64,
    sleepers: usize,
) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while faulty.answered(op) < count {
        assert!(
            std::time::Instant::now() < until,
            "{count} {op:?} calls were not answered within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    env.await_sleepers(sleepers);
}

/// Returns once `waiters` of `faulty`'s clients' waiters have subscribed and every try made so
/// far is answered, then once `waiters` threads sleep as the environment tells, their tries
/// all answered. (A waiter tries once more after subscribing, unless its backend heard no
/// release since its first try: either way, it is asleep after its last try.)
pub(crate) fn await_asleep(
    env: &dyn crate::env::TestEnv,
    faulty: &dlocks::testing::FaultyBackend,
    waiters: usize,
) {
    await_settled(faulty, waiters);
    env.await_sleepers(waiters);
    await_settled(faulty, 0);
}

/// Waits (30 s at most) until `waiters` subscriptions made through `faulty` were answered and no
/// try went through it for `quiet`, every one answered: its waiters sleep, as far as a real
/// clock can tell. A waiter that subscribed tries once more right away when its backend had not
/// heard the lock's releases before its first try (a new client's first wait); a count read
/// as soon as the subscription is answered may come before that try.
pub fn await_quiet(
    faulty: &dlocks::testing::FaultyBackend,
    waiters: usize,
    quiet: std::time::Duration,
) {
    use dlocks::testing::Op;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        await_settled(faulty, waiters);
        let tries = faulty.calls(Op::TryAcquire);
        std::thread::sleep(quiet);
        if faulty.calls(Op::TryAcquire) == tries && faulty.answered(Op::TryAcquire) == tries {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "the waiters behind the backend kept trying for 30 s"
        );
    }
}

/// Waits (30 s at most) until `waiters` subscriptions made through `faulty` were answered, and
/// every try sent through it was.
pub fn await_settled(faulty: &dlocks::testing::FaultyBackend, waiters: usize) {
    use dlocks::testing::Op;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while faulty.answered(Op::Subscribe) < waiters as u64
        || faulty.answered(Op::TryAcquire) != faulty.calls(Op::TryAcquire)
    {
        assert!(
            std::time::Instant::now() < until,
            "{waiters} waiters did not subscribe, or a try was not answered, within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
