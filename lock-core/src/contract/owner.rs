//! Who holds a lock, and who waits for one: the ids a store records.
//!
//! A hold's id is its own (`<client id>:<hold number>`), never reused: a step that reaches the
//! store late (a release retried after its reply was lost, a renewal stuck in the network) names
//! the hold it was sent for, and cannot act on a later hold of the same thread. A waiter's id
//! (`<client id>:<thread number>`, the form Redisson gives its owners) names the thread's place
//! in a store-side queue, which outlives a single attempt.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An identity a backend records: a lock's holder (one hold, [`OwnerId::hold`]), or a waiter
/// in a store-side queue (one thread, [`OwnerId::current_thread`]).
///
/// Both have the form Redisson gives its owners, `<client id>:<number>`, so a Redisson client
/// reading the store sees ordinary owners. Reentrancy is per thread and counted by the client;
/// the store sees one hold per id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// The waiter id of the calling thread within the client identified by `client_id`:
    /// `<client id>:<thread number>`. The thread number is assigned by dlock the first time a
    /// thread asks (Rust's `ThreadId` has no stable numeric form). It names the thread's place in
    /// a store-side queue (a fair lock's), never a hold.
    pub fn current_thread(client_id: &str) -> Self {
        thread_local! {
            /// The last owner id made on this thread: most threads use one client.
            static LAST: std::cell::RefCell<Option<(Arc<str>, OwnerId)>> =
                const { std::cell::RefCell::new(None) };
        }
        let make = || OwnerId(format!("{client_id}:{}", thread_number()).into());
        LAST.try_with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some((client, owner)) if &**client == client_id => owner.clone(),
                _ => {
                    let owner = make();
                    *last = Some((client_id.into(), owner.clone()));
                    owner
                }
            }
        })
        .unwrap_or_else(|_| make())
    }

    /// A fresh hold id of the client `client_id`: `<client id>:<n>`, with `n` new for every
    /// call. The numbers start at a random point of the 62-bit range in each process, so a
    /// client id reused after a restart does not meet its earlier holds' ids either.
    pub fn hold(client_id: &str) -> Self {
        static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
        let next = NEXT.get_or_init(|| {
            // 2^40 upwards, so hold numbers never look like thread numbers.
            let start = u64::from_le_bytes(
                uuid::Uuid::new_v4().as_bytes()[..8]
                    .try_into()
                    .unwrap_or([1; 8]),
            );
            AtomicU64::new((1 << 40) + start % (1 << 61))
        });
        OwnerId(format!("{client_id}:{}", next.fetch_add(1, Ordering::Relaxed)).into())
    }

    /// A fresh owner id of the client `client_id` that no thread has, `<client id>:owned-<n>`:
    /// the owner of a hold of its own (an owned guard, a leadership), never re-entered.
    pub fn unique(client_id: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        OwnerId(format!("{client_id}:owned-{}", NEXT.fetch_add(1, Ordering::Relaxed)).into())
    }

    /// A fresh semaphore permit id: 32 lowercase hex digits (16 random bytes), the form of
    /// Redisson's permit ids, unique across clients and processes.
    pub fn permit() -> Self {
        OwnerId(uuid::Uuid::new_v4().simple().to_string().into())
    }

    /// An owner id from its text form, for backends reading one back from their store and for
    /// tests that play other clients.
    pub fn from_raw(raw: impl Into<Arc<str>>) -> Self {
        OwnerId(raw.into())
    }

    /// The text form, as stored by the backend.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The calling thread's number: unique within this process, never reused, starting at 1.
pub(crate) fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}
