//! The unlock latch: an unlock whose reply was lost is sent again and replays the first answer
//! instead of acting twice; and latches are deleted once the answer is in hand (with the
//! connection's next command), or expire, leaving no garbage keys behind (the cases shared with
//! PostgreSQL, `dlock_test_support::server_cases::latch`, and what Redis keeps of the latch).

#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::{keys, latch};
use dlocks::LockClient;

#[test]
fn an_unlock_whose_reply_was_lost_is_replayed_by_its_latch() {
    latch::an_unlock_whose_reply_was_lost_is_replayed_by_its_latch::<RedisServer>(
        |server, client| {
            let mut admin = server.admin();
            // The latch, no longer needed once the answer arrived, goes with the next command
            // sent to the server, on whichever pooled connection; until then it carries an
            // expiry of a few response timeouts.
            for latch in keys(&mut admin, "redisson_unlock_latch:*") {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&latch)
                    .query(&mut admin)
                    .expect("PTTL");
                assert!((1..=6_000).contains(&ttl), "{latch}: PTTL {ttl}");
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            let other = client.lock("latch:next");
            while !keys(&mut admin, "redisson_unlock_latch:{latch:lost-reply}*").is_empty() {
                assert!(Instant::now() < deadline, "the latch was never deleted");
                assert!(other.try_lock().expect("try_lock").is_some());
            }
        },
    );
}

#[test]
fn a_release_that_found_nothing_is_not_latched() {
    latch::a_release_that_found_nothing_reports_the_loss::<RedisServer>(0);
}

#[test]
fn two_hundred_pairs_on_distinct_names_leave_no_garbage() {
    latch::two_hundred_pairs_on_distinct_names_leave_no_garbage::<RedisServer>();
}

/// A string under a synchronizer's name that is not a count (another program's key) is the
/// name in use as something else: `WrongKind` from every step, and the key left as it was.
#[test]
fn a_string_that_is_not_a_count_is_the_wrong_kind_for_every_synchronizer() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut admin = server.admin();
    let () = redis::cmd("SET")
        .arg("foreign")
        .arg("hello")
        .query(&mut admin)
        .expect("SET");
    let wrong = |result: Result<(), dlocks::LockError>, what: &str| {
        assert!(
            matches!(result, Err(dlocks::LockError::WrongKind { .. })),
            "{what}: {result:?}"
        );
    };
    let latch = client.count_down_latch("foreign");
    wrong(latch.count().map(drop), "count");
    wrong(latch.try_set_count(2).map(drop), "try_set_count");
    wrong(latch.count_down(), "count_down");
    wrong(latch.wait_for(Duration::ZERO).map(drop), "wait_for");
    let semaphore = client.semaphore("foreign");
    wrong(semaphore.try_set_permits(1).map(drop), "try_set_permits");
    wrong(semaphore.add_permits(1), "add_permits");
    wrong(semaphore.available_permits().map(drop), "available_permits");
    wrong(semaphore.try_acquire().map(drop), "try_acquire");
    wrong(client.lock("foreign").try_lock().map(drop), "a lock");
    wrong(
        client
            .leader_election("foreign")
            .try_campaign_for("x", Duration::ZERO)
            .map(drop),
        "a campaign",
    );
    let kept: String = redis::cmd("GET")
        .arg("foreign")
        .query(&mut admin)
        .expect("GET");
    assert_eq!(kept, "hello");
}

#[test]
fn a_set_once_step_whose_reply_was_lost_answers_as_it_first_did() {
    latch::a_set_once_step_whose_reply_was_lost_answers_as_it_first_did::<RedisServer>();
}

#[test]
fn a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss() {
    latch::a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss::<RedisServer>(
    );
}
