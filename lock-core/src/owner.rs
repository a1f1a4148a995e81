//! Who holds a lock: `<client uuid>:<thread number>`, the owner id Redisson uses.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The identity a backend records as a lock's holder: `<client uuid>:<thread number>`.
///
/// Reentrancy and ownership are per thread, as in Redisson, so two threads of one client are
/// two owners. The thread number is assigned by dlock the first time a thread takes a lock
/// (Rust's `ThreadId` has no stable numeric form).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// The owner id of the calling thread within the client identified by `client_id`.
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
