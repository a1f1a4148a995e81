//! Releases keep their answer by request id (a release record): a release sent again after its
//! reply was lost answers as the first did instead of acting twice; a release that found nothing
//! leaves no record; and records do not pile up.

use std::time::Duration;

use dlocks::{LockClient, LockError};

use super::ServerEnv;
use crate::tcp_proxy::TcpProxy;

/// The release runs on the server, and the connection is cut before its reply comes back. The
/// backend sends it again on a new connection: without the record it would find the lock
/// already gone and report the lease lost (or, had another owner taken it meanwhile, leave
/// that owner's hold alone all the same: the retry only replays). A backend that keeps no
/// record ([`ServerEnv::KEEPS_RELEASE_RECORDS`]) does report the lease lost: its hold may have
/// ended otherwise, and "released" is never inferred.
pub fn an_unlock_whose_reply_was_lost_is_answered_as_it_first_was<E: ServerEnv>() {
    replay_a_release_whose_reply_was_lost::<E>();
}

/// The steps of [`an_unlock_whose_reply_was_lost_is_answered_as_it_first_was`] on lock
/// `replayed:lost-reply`; answers the server, the proxy and the client through it, for a
/// backend's own look at what became of the record.
pub fn replay_a_release_whose_reply_was_lost<E: ServerEnv>() -> (E, TcpProxy, LockClient) {
    let server = E::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let lock = client.lock("replayed:lost-reply");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");

    proxy.cut_reply_to(E::RELEASE_REQUEST);
    let unlocked = guard.unlock();
    if E::KEEPS_RELEASE_RECORDS {
        unlocked.expect("the retried unlock replays the first answer");
    } else {
        let error = unlocked.expect_err("no record: the hold is gone, not known released");
        assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    }
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert!(!lock.is_locked().expect("status"), "released once");
    (server, proxy, client)
}

/// A release that found the lock gone (force-unlocked) is an error; what it recorded is the
/// backend's ([`ServerEnv::RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING`]).
pub fn a_release_that_found_nothing_reports_the_loss<E: ServerEnv>() {
    let server = E::start();
    let client = server.client();
    let lock = client.lock("replayed:nothing");
    let guard = lock.lock_with_lease(Duration::from_secs(30)).expect("lock");
    assert!(lock.force_unlock().expect("force"));
    let error = guard.unlock().expect_err("nothing to release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    assert_eq!(
        server.release_records(),
        E::RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING
    );
}

/// Each record goes with a later release (or command): after two hundred lock and unlock
/// pairs on distinct names, no lock is left and at most the last record of each of the two
/// pooled connections.
pub fn two_hundred_pairs_on_distinct_names_leave_no_garbage<E: ServerEnv>() {
    let server = E::start();
    let client = server.client_with_pool(2);
    for i in 0..200 {
        client
            .lock(format!("garbage:{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
    }
    assert_eq!(server.locks(), 0, "no lock is left after the last unlock");
    let records = server.release_records();
    assert!(
        records <= 2,
        "at most one record per pooled connection is left, found {records}"
    );
}

/// A set-once step (a latch's `try_set_count`, a semaphore's `try_set_permits`) runs on the
/// server, and its connection is cut before the reply comes back. The backend sends it again:
/// the second attempt answers as the first did ("set"), not what it finds ("already set"), so
/// the caller that set the count goes on to start its workers.
pub fn a_set_once_step_whose_reply_was_lost_answers_as_it_first_did<E: ServerEnv>() {
    let server = E::start();
    let proxy = TcpProxy::start(server.port());
    let client = server.client_through(&proxy);
    let name = format!("set-once:{}", uuid::Uuid::new_v4().simple());
    // The server knows the steps first (a step it does not know yet is refused and sent again
    // whatever its reply's fate).
    assert!(client
        .count_down_latch(format!("{name}:warm-latch"))
        .try_set_count(1)
        .expect("warm up"));
    assert!(client
        .semaphore(format!("{name}:warm-permits"))
        .try_set_permits(1)
        .expect("warm up"));
    let latch = client.count_down_latch(format!("{name}:latch"));
    let needles = server.step_request(&format!("{name}:latch"));
    proxy.cut_reply_to_all(&needles.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        latch.try_set_count(3).expect("sent again after the cut"),
        "the count this call set was answered as set by someone else"
    );
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert_eq!(latch.count().expect("count"), 3, "set once");
    assert!(
        !latch.try_set_count(5).expect("try again"),
        "a second call is refused"
    );

    let semaphore = client.semaphore(format!("{name}:permits"));
    let needles = server.step_request(&format!("{name}:permits"));
    proxy.cut_reply_to_all(&needles.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        semaphore
            .try_set_permits(2)
            .expect("sent again after the cut"),
        "the permits this call set were answered as set by someone else"
    );
    assert_eq!(proxy.cuts(), 2, "the reply was really cut");
    assert_eq!(semaphore.available_permits().expect("available"), 2);
}

/// The release of a hold is stuck in the network (held back by the proxy) while the hold's
/// lease runs out on the store and an operator force-unlocks the name; then the connection
/// breaks and the backend sends the release again. The retry finds the hold ended before any
/// release: the caller is told the lease was lost, not that it released.
pub fn a_release_retried_after_its_hold_ran_out_and_was_forced_reports_the_loss<E: ServerEnv>() {
    let server = E::start();
    let proxy = std::sync::Arc::new(TcpProxy::start(server.port()));
    let client = server.client_through(&proxy);
    let name = format!("replayed:ran-out:{}", uuid::Uuid::new_v4().simple());
    let lease = Duration::from_millis(500);
    let guard = client
        .lock(name.clone())
        .lock_with_lease(lease)
        .expect("lock");
    let taken_at = std::time::Instant::now();
    proxy.hold_back_next(E::RELEASE_REQUEST);
    let operator = server.client();
    let port = server.port();
    let network = {
        let proxy = proxy.clone();
        let name = name.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while proxy.held_back() == 0 {
                assert!(std::time::Instant::now() < deadline, "no release held back");
                std::thread::sleep(Duration::from_millis(5));
            }
            // The store's lease runs out while the release is stuck (as the operator sees: a
            // store may end a lease a little after it ran out, etcd's up to a second and a half).
            std::thread::sleep(
                (taken_at + lease * 3 / 2).saturating_duration_since(std::time::Instant::now()),
            );
            let lock = operator.lock(name);
            while lock.is_locked().expect("status") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the lease never ran out"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let held = lock.force_unlock().expect("force unlock");
            assert!(!held, "the lease had run out");
            // The connection breaks: the stuck release never arrives, and is sent again.
            proxy.redirect(port);
        })
    };
    let unlocked = guard.unlock();
    network.join().expect("network thread");
    let error = unlocked.expect_err("the hold ended before its release reached the store");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
}

/// A hold whose lease ran out is asked for again under its id (as a thread's next acquire asks
/// after one whose answer was lost), then released with the release's reply cut. The store
/// either made the hold again, and then the release sent again answers "released" as its first
/// attempt did (where it keeps records), or answered that the hold is gone, and then there is
/// nothing to release. Never "not held" for a hold the first attempt did release: the caller
/// would report a lease lost that it never lost.
pub fn a_hold_made_again_under_its_id_is_released_once<E: ServerEnv>() {
    use dlocks::backend::{AcquireRequest, LockRef, Release};
    let server = E::start();
    let proxy = TcpProxy::start(server.port());
    let backend = server.backend_through(&proxy, super::Timeouts::default());
    let direct = server.backend_with(super::Timeouts::default());
    let name = format!("replayed:made-again:{}", uuid::Uuid::new_v4().simple());
    let lock = LockRef::new(&name, dlocks::LockKind::Reentrant);
    let owner = crate::conformance::new_owner();
    let lease = Duration::from_millis(300);
    let first = backend
        .try_acquire(&AcquireRequest::new(lock, &owner, lease))
        .expect("the first acquire");
    assert!(first.is_acquired(), "the name is free");
    // The lease runs out on the store (etcd ends a lease up to a second and a half late).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let free = || !direct.status(lock, &owner).expect("status").locked;
    while !free() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never ran out"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = backend
        .try_acquire(&AcquireRequest::new(lock, &owner, Duration::from_secs(30)))
        .expect("asked again under its id");
    // The release's own request, found by the name it carries (not by its text, which goes
    // only with a statement's first use on a connection).
    let needles = server.step_request(&name);
    proxy.cut_reply_to_all(&needles.iter().map(String::as_str).collect::<Vec<_>>());
    let released = backend.release(lock, &owner).expect("the release");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    if again.is_acquired() && E::KEEPS_RELEASE_RECORDS {
        assert!(
            matches!(released, Release::Released | Release::ReleasedToOthers),
            "the first attempt released it: {released:?}"
        );
    } else if !again.is_acquired() {
        assert!(
            matches!(again, dlocks::backend::Acquire::Gone { .. }),
            "refused on a free name: {again:?}"
        );
        assert_eq!(released, Release::NotHeld, "nothing was made to release");
    }
    assert!(free(), "nothing left held");
}
