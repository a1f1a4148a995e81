//! Writes behind `dlocks::fence` on a server that keeps data, with the server's own lock
//! backend handing out the tokens: what every store's fence must do, written once against
//! [`FencedData`] and run on each by [`fenced_writes_suite!`](crate::fenced_writes_suite).

use std::time::Duration;

use dlocks::LockError;

use super::ServerEnv;

/// Values per resource kept behind the fence on one server.
pub trait FencedStore {
    /// Writes `value` to `resource` behind the fence with fencing token `token`.
    fn write(&mut self, resource: &str, value: &str, token: u64) -> Result<(), LockError>;

    /// What `resource` holds (`None` before a first write).
    fn read(&mut self, resource: &str) -> Option<String>;
}

/// A server harness whose server keeps data behind the fence too.
pub trait FencedData: ServerEnv {
    /// A store of values behind the fence on this server, set up on first use.
    fn fenced_store(&self) -> Box<dyn FencedStore>;
}

/// A holder whose lease ran out while it paused writes late, after the next holder wrote: the
/// late write is refused as stale, naming both tokens, and the next holder's value stays.
pub fn a_late_write_of_a_holder_whose_lease_ran_out_is_refused<E: FencedData>() {
    let server = E::start();
    let mut store = server.fenced_store();
    let (paused, next) = (server.client(), server.client());
    // The lock of one resource, named apart from it (on Redis a lock's name is its key).
    let (lock, resource) = ("lock:account:1", "account:1");

    let first = paused
        .fenced_lock(lock)
        .lock_with_lease(Duration::from_millis(300))
        .expect("the first holder");
    let late = first.token();
    // The first holder pauses (its lease runs out meanwhile); the next one gets in and writes.
    let second = next
        .fenced_lock(lock)
        .try_lock_for(Duration::from_secs(20))
        .expect("wait")
        .expect("the lock once the first lease ran out");
    assert!(second.token() > late, "a later hold has a higher token");
    store
        .write(resource, "second", second.token())
        .expect("the current holder writes");

    // The first holder wakes up and writes.
    match store.write(resource, "first, late", late) {
        Err(LockError::StaleToken {
            resource: refused,
            token,
            newest,
        }) => {
            assert_eq!(
                (refused.as_str(), token, newest),
                (resource, late, second.token())
            );
        }
        other => panic!("a late write is refused as stale, not {other:?}"),
    }
    assert_eq!(store.read(resource).as_deref(), Some("second"));
    assert!(first.is_lost());
    second.unlock().expect("unlock");
}

/// One hold writes again with the same token; a resource nobody wrote takes any token; a
/// newer hold's token takes over from an older one's.
pub fn the_same_token_writes_again_and_a_new_resource_takes_any_token<E: FencedData>() {
    let server = E::start();
    let mut store = server.fenced_store();
    let client = server.client();
    let (lock, resource) = ("lock:report", "report");

    let guard = client.fenced_lock(lock).lock().expect("lock");
    let token = guard.token();
    store.write(resource, "one", token).expect("a first write");
    store
        .write(resource, "two", token)
        .expect("the same hold again");
    assert_eq!(store.read(resource).as_deref(), Some("two"));
    guard.unlock().expect("unlock");

    let next = client.fenced_lock(lock).lock().expect("lock again");
    store
        .write(resource, "three", next.token())
        .expect("a newer hold");
    assert!(store
        .write(resource, "two again", token)
        .is_err_and(|error| error.is_stale_token()));
    next.unlock().expect("unlock");

    store
        .write("never-written", "first", 1)
        .expect("a resource nobody wrote takes any token");
    assert_eq!(store.read("never-written").as_deref(), Some("first"));
    assert_eq!(
        store.read(resource).as_deref(),
        Some("three"),
        "a refused write wrote nothing"
    );
}

/// Instantiates the fenced-write cases for the server harness `$server`, a type implementing
/// [`FencedData`].
#[macro_export]
macro_rules! fenced_writes_suite {
    ($server:ty) => {
        /// Writes behind `dlocks::fence`, with tokens from this server's own locks.
        mod fenced_writes_shared {
            use super::*;

            #[test]
            fn a_late_write_of_a_holder_whose_lease_ran_out_is_refused() {
                $crate::server_cases::fenced_writes::a_late_write_of_a_holder_whose_lease_ran_out_is_refused::<$server>();
            }

            #[test]
            fn the_same_token_writes_again_and_a_new_resource_takes_any_token() {
                $crate::server_cases::fenced_writes::the_same_token_writes_again_and_a_new_resource_takes_any_token::<$server>();
            }
        }
    };
}
