//! The key layout: a lock named N is the prefix `N/`, as etcd's `concurrency.Mutex` and
//! `Election` lay it out, and each kind keeps its keys in a folder of its own under it.
//!
//! | kind | keys under `<namespace><N>/` |
//! |---|---|
//! | reentrant, fenced | `lock/<client id>` = the hold id |
//! | fair | `fair/<waiter id>` = the hold id of the waiter's latest attempt |
//! | read, write | `rw/r/<hold id>`, `rw/w/<client id>` = the hold id |
//! | semaphore | `sem/p/<permit id>` per permit held, `sem/total` = its permits |
//! | latch | `latch/count` = its count |
//! | election | `leader/<client id>` = the candidate |
//!
//! Every contender's key is bound to a lease; the one created first holds. A client's key of
//! an exclusive kind is the same for all its holds of the name, as an etcd session's is (a
//! hold is told apart by the key's create revision): a name taken and released a million
//! times leaves one key's history in etcd's index until compaction, not a million keys its
//! prefix comparison would walk. `/` and `%` in names and ids are written `%2F` and `%25`, so
//! no name's keys fall under another's.

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
            Family::Fair => "fair/",
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

/// Whether a kind's holds share their client's key (the exclusive kinds: a client has one
/// hold of such a name at a time).
pub(crate) fn keyed_by_client(kind: LockKind) -> bool {
    matches!(
        kind,
        LockKind::Reentrant | LockKind::Fenced | LockKind::Write | LockKind::Election
    )
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

/// One name's keys in a namespace.
#[derive(Debug, Clone)]
pub(crate) struct NameKeys {
    /// `<namespace><escaped name>/`.
    pub(crate) prefix: Vec<u8>,
}

impl NameKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        NameKeys {
            prefix: format!("{namespace}{}/", escape(name)).into_bytes(),
        }
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

    /// The keys of `family`.
    pub(crate) fn family(&self, family: Family) -> Span {
        Span::prefix(&self.under(family.folder()))
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

    /// The key of `owner`'s hold (a fair waiter's place, for the fair lock) on `lock`: for
    /// the exclusive kinds, its client's key.
    pub(crate) fn hold(&self, lock: LockRef<'_>, owner: &OwnerId) -> Vec<u8> {
        let folder = match lock.kind {
            LockKind::Read => "rw/r/",
            LockKind::Write => "rw/w/",
            LockKind::Semaphore => "sem/p/",
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
    }
}
