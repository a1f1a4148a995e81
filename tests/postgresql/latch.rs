//! Releases on PostgreSQL are latched by request id: a release sent again after its reply was
//! lost replays the first answer instead of acting twice, and the latch goes once the answer is
//! in hand (the cases shared with Redis,
//! `dlock_test_support::server_cases::latch`, and what PostgreSQL keeps of the latch).

#![cfg(feature = "postgres")]

use dlock_test_support::postgres_server::PostgresServer;
use dlock_test_support::server_cases::{latch, ServerEnv};

#[test]
fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch() {
    latch::an_unlock_whose_reply_was_lost_is_replayed_by_its_latch::<PostgresServer>(
        |server, client| {
            assert_eq!(
                server.latches(),
                1,
                "the answered retry's latch is kept until the next release"
            );
            // The next release on that connection deletes it.
            let lock = client.lock("latch:lost-reply");
            lock.lock().expect("lock").unlock().expect("unlock");
            assert_eq!(server.latches(), 1, "only the last release's latch is left");
        },
    );
}

#[test]
fn a_release_that_found_nothing_is_not_latched() {
    latch::a_release_that_found_nothing_is_not_latched::<PostgresServer>();
}

#[test]
fn two_hundred_pairs_on_distinct_names_leave_no_garbage() {
    latch::two_hundred_pairs_on_distinct_names_leave_no_garbage::<PostgresServer>();
}
