//! The unlock latch: a release sent again under the same request id replays the first answer.

#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use dlock::{Acquire, DistributedLock, OwnerId, Release};
use support::redis_server::RedisServer;

#[test]
fn a_repeated_release_request_replays_its_result_instead_of_acting_again() {
    let server = RedisServer::start();
    let backend = server.backend();
    let first = OwnerId::from_raw("first-client:1");
    let second = OwnerId::from_raw("second-client:1");
    let lease = Duration::from_secs(20);

    assert_eq!(
        backend
            .try_acquire("latch", &first, lease)
            .expect("acquire"),
        Acquire::Acquired
    );
    assert_eq!(
        backend
            .release_request("latch", &first, "req-1")
            .expect("release"),
        Release::Released
    );

    // Another owner takes the lock; the first release's request arrives again (a retry after
    // a lost reply). It must answer as the first time did and leave the new holder alone.
    assert_eq!(
        backend
            .try_acquire("latch", &second, lease)
            .expect("acquire"),
        Acquire::Acquired
    );
    assert_eq!(
        backend
            .release_request("latch", &first, "req-1")
            .expect("replay"),
        Release::Released
    );
    assert!(
        backend
            .status("latch", &second)
            .expect("status")
            .held_by_owner,
        "the new holder still holds it"
    );

    // A new request from the first owner is answered on the lock as it is now.
    assert_eq!(
        backend
            .release_request("latch", &first, "req-2")
            .expect("release"),
        Release::NotHeld
    );
    assert_eq!(
        backend
            .release_request("latch", &second, "req-3")
            .expect("release"),
        Release::Released
    );
}

#[test]
fn a_release_that_found_nothing_is_not_latched() {
    let server = RedisServer::start();
    let backend = server.backend();
    let owner = OwnerId::from_raw("client:1");
    assert_eq!(
        backend
            .release_request("nothing", &owner, "req")
            .expect("release"),
        Release::NotHeld
    );
    let mut admin = server.admin();
    let latches: Vec<String> = redis::cmd("KEYS")
        .arg("redisson_unlock_latch:*")
        .query(&mut admin)
        .expect("KEYS");
    assert!(latches.is_empty(), "{latches:?}");
}
