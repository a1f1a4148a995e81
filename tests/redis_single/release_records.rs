//! What Redis adds to the replayed-release cases every server backend shares
//! (`dlock_test_support::server_cases::replayed_releases`, run by `server_suite!`): a release's
//! record (Redisson's unlock latch key) expires, and one answered at its first sending is
//! deleted sooner (with the connection's next command), leaving no garbage keys behind; and a
//! string that is not a count is the wrong kind for every synchronizer.

#![cfg(feature = "redis")]

use std::time::Duration;

use dlock_test_support::redis_server::keys;
use dlock_test_support::redis_server::RedisServer;
use dlock_test_support::server_cases::replayed_releases;
use dlocks::LockClient;

/// The record of a release sent twice stays until it expires, a few response timeouts on: the
/// first copy, whose reply never came, may as well be held up on its way as lost, and must
/// replay when it lands, not release whatever the name holds by then. The next commands leave
/// it (a release answered at its first sending deletes its record with the next command:
/// `two_hundred_pairs_on_distinct_names_leave_no_garbage`).
#[test]
fn a_replayed_releases_record_stays_until_it_expires() {
    let (server, _proxy, client) =
        replayed_releases::replay_a_release_whose_reply_was_lost::<RedisServer>();
    let mut admin = server.admin();
    let records = keys(&mut admin, "redisson_unlock_latch:{replayed:lost-reply}*");
    assert_eq!(records.len(), 1, "{records:?}");
    let other = client.lock("replayed:next");
    for _ in 0..8 {
        assert!(other.try_lock().expect("try_lock").is_some());
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&records[0])
        .query(&mut admin)
        .expect("PTTL");
    assert!((1..=6_000).contains(&ttl), "{}: PTTL {ttl}", records[0]);
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
