//! The key layout: a lock named N is the prefix `N/`, as etcd's `concurrency.Mutex` and
//! `Election` lay it out, and each kind keeps its keys in a folder of its own under it.
//!
//! | kind | keys under `<namespace><N>/` |
//! |---|---|
//! | reentrant, fenced | `lock/<client id>` = the hold id |
//! | fair | `queue/<waiter id>` per waiter queued (empty), and its hold once its turn came (= the hold id) |
//! | read, write | `rw/r/<hold id>`, `rw/w/<client id>` = the hold id |
//! | semaphore | `sem/p/<permit id>` per permit held, `sem/total` = its permits |
//! | latch | `latch/count` = its count |
//! | election | `leader/<hold id>` = the candidate |
//!
//! Every contender's key is bound to a lease; the one created first holds (the fair lock's
//! waiters queue as etcd's `Mutex` contenders do, by their keys' create revisions). A client's key of
//! an exclusive lock is the same for all its holds of the name, as an etcd session's is (the
//! key's value tells which hold it is): a name taken and released a million times leaves one
//! key's history in etcd's index until compaction, not a million keys its prefix comparison
//! would walk. `/` and `%` in names and ids are written `%2F` and `%25`, so no name's keys
//! fall under another's.
//!
//! Outside every name's prefix (no `/` after the namespace, so under no name) the backend keeps
//! what must outlive a name's keys for a while: `dlock-ended:<N>:<hold id>` for each hold an
//! operator force-unlocked (an acquire under that id is refused for ten minutes), and
//! `dlock-request:<N>:<request id>` = the answer of a set-once step (a step sent again after
//! its reply was lost answers as it first did), and `dlock-writers:<N>:<waiter id>` for each
//! writer waiting for the read-write lock, `dlock-readers:<N>:<waiter id>` for each reader
//! waiting behind a writer's hold and `dlock-waiting:<N>:<waiter id>` for each waiter of the
//! plain lock, on short leases of their own (no new reader is let in while a writer's lives,
//! no writer takes the lock while a reader's lives, a free plain lock goes to the waiter marked
//! first; outside the name's keys, a wait is not a use of the name). In these, `:` is written
//! `%3A` as well.

use dlock_core::backend::{LockRef, OwnerId};
use dlock_core::LockKind;

use crate::wire::{prefix_end, Span};

/// What a name is in use as: kinds of one family share keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Lock,
    Fair,
    ReadWrite,
    Semaphore,
    Latch,
    Election,
}

impl Family {
    pub(crate) fn of(kind: LockKind) -> Option<Family> {
        match kind {
            LockKind::Reentrant | LockKind::Fenced => Some(Family::Lock),
            LockKind::Fair => Some(Family::Fair),
            LockKind::Read | LockKind::Write => Some(Family::ReadWrite),
            LockKind::Semaphore => Some(Family::Semaphore),
            LockKind::Latch => Some(Family::Latch),
            LockKind::Election => Some(Family::Election),
            _ => None,
        }
    }

    fn folder(self) -> &'static str {
        match self {
            Family::Lock => "lock/",
            Family::Fair => "queue/",
            Family::ReadWrite => "rw/",
            Family::Semaphore => "sem/",
            Family::Latch => "latch/",
            Family::Election => "leader/",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Family::Lock => "a reentrant lock",
            Family::Fair => "a fair lock",
            Family::ReadWrite => "a read-write lock",
            Family::Semaphore => "a semaphore",
            Family::Latch => "a count-down latch",
            Family::Election => "a leader election",
        }
    }

    const ALL: [Family; 6] = [
        Family::Lock,
        Family::Fair,
        Family::ReadWrite,
        Family::Semaphore,
        Family::Latch,
        Family::Election,
    ];
}

/// Whether a kind's holds share their client's key (the exclusive locks: a client has one hold
/// of such a name at a time).
pub(crate) fn keyed_by_client(kind: LockKind) -> bool {
    matches!(
        kind,
        LockKind::Reentrant | LockKind::Fenced | LockKind::Write
    )
}

/// Whether a kind's hold key's value names the hold it is (a client's key serves its holds in
/// turn; a fair lock's key is a place in the queue, empty, until its hold takes the lock);
/// else the key is the hold's alone from its creation.
pub(crate) fn shares_key(kind: LockKind) -> bool {
    keyed_by_client(kind) || kind == LockKind::Fair
}

/// The client id in a hold id (`<client id>:<n>`); permits (bare random ids) have none.
pub(crate) fn client_of(owner: &OwnerId) -> Option<&str> {
    owner
        .as_str()
        .rsplit_once(':')
        .map(|(client, _)| client)
        .filter(|c| !c.is_empty())
}

/// Writes `/` and `%` so that a name or id is one path segment.
pub(crate) fn escape(text: &str) -> String {
    text.replace('%', "%25").replace('/', "%2F")
}

/// Reads back what [`escape`] wrote.
pub(crate) fn unescape(text: &str) -> String {
    text.replace("%2F", "/").replace("%25", "%")
}

/// Writes `:` too, so that a name and an id joined by `:` read back one way only.
pub(crate) fn escape_field(text: &str) -> String {
    escape(text).replace(':', "%3A")
}

/// One name's keys in a namespace.
#[derive(Debug, Clone)]
pub(crate) struct NameKeys {
    /// `<namespace><escaped name>/`.
    pub(crate) prefix: Vec<u8>,
    /// `<namespace>dlock-ended:<escaped name>:`.
    ended: String,
    /// `<namespace>dlock-request:<escaped name>:`.
    requests: String,
    /// `<namespace>dlock-writers:<escaped name>:`.
    writers: String,
    /// `<namespace>dlock-readers:<escaped name>:`.
    readers: String,
    /// `<namespace>dlock-waiting:<escaped name>:`.
    waiting: String,
}

impl NameKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        NameKeys {
            prefix: format!("{namespace}{}/", escape(name)).into_bytes(),
            ended: format!("{namespace}dlock-ended:{}:", escape_field(name)),
            requests: format!("{namespace}dlock-request:{}:", escape_field(name)),
            writers: format!("{namespace}dlock-writers:{}:", escape_field(name)),
            readers: format!("{namespace}dlock-readers:{}:", escape_field(name)),
            waiting: format!("{namespace}dlock-waiting:{}:", escape_field(name)),
        }
    }

    /// The mark of the reader `waiter` waiting behind a writer's hold of this read-write lock.
    pub(crate) fn reader_mark(&self, waiter: &OwnerId) -> Vec<u8> {
        format!("{}{}", self.readers, escape_field(waiter.as_str())).into_bytes()
    }

    /// The marks of every reader waiting behind a writer's hold of this read-write lock.
    pub(crate) fn reader_marks(&self) -> Span {
        Span::prefix(self.readers.as_bytes())
    }

    /// The mark of the waiter `waiter` waiting for this name's plain lock.
    pub(crate) fn lock_waiter(&self, waiter: &OwnerId) -> Vec<u8> {
        format!("{}{}", self.waiting, escape_field(waiter.as_str())).into_bytes()
    }

    /// The marks of every waiter waiting for this name's plain lock.
    pub(crate) fn lock_waiters(&self) -> Span {
        Span::prefix(self.waiting.as_bytes())
    }

    /// The mark of the writer `waiter` waiting for this read-write lock.
    pub(crate) fn writer_mark(&self, waiter: &OwnerId) -> Vec<u8> {
        format!("{}{}", self.writers, escape_field(waiter.as_str())).into_bytes()
    }

    /// The marks of every writer waiting for this read-write lock.
    pub(crate) fn writer_marks(&self) -> Span {
        Span::prefix(self.writers.as_bytes())
    }

    /// The marks of the waiters of `kind` kept in turn (the plain lock's, a read-write lock's
    /// writers'), and `waiter`'s among them; `None` for the other kinds.
    pub(crate) fn turn_marks(&self, kind: LockKind, waiter: &OwnerId) -> Option<(Span, Vec<u8>)> {
        match kind {
            LockKind::Reentrant | LockKind::Fenced => {
                Some((self.lock_waiters(), self.lock_waiter(waiter)))
            }
            LockKind::Write => Some((self.writer_marks(), self.writer_mark(waiter))),
            _ => None,
        }
    }

    /// The key that says hold `owner` of this name was force-unlocked (its tombstone).
    pub(crate) fn ended(&self, owner: &str) -> Vec<u8> {
        format!("{}{}", self.ended, escape_field(owner)).into_bytes()
    }

    /// The key that keeps the answer of the set-once request `request` on this name.
    pub(crate) fn request(&self, request: &str) -> Vec<u8> {
        format!("{}{}", self.requests, escape_field(request)).into_bytes()
    }

    /// Every key of the name (of every kind, and other programs' contenders).
    pub(crate) fn all(&self) -> Span {
        Span::prefix(&self.prefix)
    }

    fn under(&self, path: &str) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(path.as_bytes());
        key
    }

    /// The holds of `family` under this name (the plain lock's, or a read-write lock's
    /// of both sides).
    pub(crate) fn holds_of(&self, family: Family) -> Span {
        Span::prefix(&self.under(family.folder()))
    }

    /// What a waiting reader's stream watches under the name: the writers' holds, the only
    /// keys there that refuse a reader and that it waits out (another kind's key is an error,
    /// which its try reports). Watching the whole name, each reader's stream had every other
    /// reader's hold come and go: with six readers, most of what etcd sent.
    pub(crate) fn reader_watch(&self) -> Vec<u8> {
        self.side(LockKind::Write).key
    }

    /// The prefix of the name's stream that a waiter of `kind` watches.
    pub(crate) fn watch_of(&self, kind: LockKind) -> Vec<u8> {
        if kind == LockKind::Read {
            self.reader_watch()
        } else {
            self.prefix.clone()
        }
    }

    /// The keys of one side of a read-write lock.
    pub(crate) fn side(&self, kind: LockKind) -> Span {
        Span::prefix(&self.under(if kind == LockKind::Read {
            "rw/r/"
        } else {
            "rw/w/"
        }))
    }

    /// The two spans of the name's keys outside `family`'s folder: both empty means nothing
    /// else uses the name.
    pub(crate) fn others(&self, family: Family) -> [Span; 2] {
        let folder = self.under(family.folder());
        [
            Span::between(&self.prefix, &folder),
            Span::between(&prefix_end(&folder), &prefix_end(&self.prefix)),
        ]
    }

    /// A fair waiter's two keys, its place in the queue and its hold once its turn came: the
    /// first, or the second while the first is a hold of the same waiter that it has not
    /// released (a guard it moved to another thread).
    pub(crate) fn places(&self, waiter: &OwnerId) -> [Vec<u8>; 2] {
        let first = self.under(&format!("queue/{}", escape(waiter.as_str())));
        let mut second = first.clone();
        second.extend_from_slice(b"/2");
        [first, second]
    }

    /// The fair lock's keys.
    pub(crate) fn queue(&self) -> Span {
        Span::prefix(&self.under("queue/"))
    }

    /// The key of `owner`'s hold on `lock`: for the exclusive locks, its client's key. A fair
    /// hold's key is its waiter's ([`places`](Self::places)), not told by the hold id: this is
    /// a key no fair hold has.
    pub(crate) fn hold(&self, lock: LockRef<'_>, owner: &OwnerId) -> Vec<u8> {
        let folder = match lock.kind {
            LockKind::Read => "rw/r/",
            LockKind::Write => "rw/w/",
            LockKind::Semaphore => "sem/p/",
            LockKind::Fair => "queue-hold/",
            kind => Family::of(kind).map_or("lock/", Family::folder),
        };
        let id = if keyed_by_client(lock.kind) {
            client_of(owner).unwrap_or(owner.as_str())
        } else {
            owner.as_str()
        };
        self.under(&format!("{folder}{}", escape(id)))
    }

    pub(crate) fn permits(&self) -> Span {
        Span::prefix(&self.under("sem/p/"))
    }

    pub(crate) fn total(&self) -> Vec<u8> {
        self.under("sem/total")
    }

    pub(crate) fn count(&self) -> Vec<u8> {
        self.under("latch/count")
    }

    /// What a key of this name says the name is in use as: `None` for a key of another
    /// program (an etcd `Mutex` or `Election` contender, `N/<lease id>`).
    pub(crate) fn family_of_key(&self, key: &[u8]) -> Option<Family> {
        let rest = key.strip_prefix(self.prefix.as_slice())?;
        Family::ALL
            .into_iter()
            .find(|family| rest.starts_with(family.folder().as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_share_keys() {
        let a = NameKeys::new("", "a");
        let nested = NameKeys::new("", "a/lock");
        assert_eq!(nested.prefix, b"a%2Flock/");
        assert!(!nested.prefix.starts_with(&a.prefix));
        let owner = OwnerId::from_raw("c:1");
        let key = a.hold(LockRef::new("a", LockKind::Write), &owner);
        assert_eq!(key, b"a/rw/w/c");
        assert_eq!(a.family_of_key(&key), Some(Family::ReadWrite));
        assert_eq!(a.family_of_key(b"a/694d7b1e"), None);
        let read = a.hold(LockRef::new("a", LockKind::Read), &owner);
        assert_eq!(read, b"a/rw/r/c:1");
        // Outside every name: no `/` after the namespace.
        assert_eq!(a.ended("c:1"), b"dlock-ended:a:c%3A1");
        assert_ne!(
            NameKeys::new("", "a:c").ended("1"),
            a.ended("c:1"),
            "names and ids never run together"
        );
    }
}
