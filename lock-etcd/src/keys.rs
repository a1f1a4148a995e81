//! The key layout: a lock named N is the prefix `N/`, as etcd's `concurrency.Mutex` and
//! `Election` lay it out, and each kind keeps its keys in a folder of its own under it.
//!
//! | kind | keys under `<namespace><N>/` |
//! |---|---|
//! | reentrant, fenced | `lock/<hold id>` |
//! | fair | `fair/<waiter id>` = the hold id of the waiter's latest attempt |
//! | read, write | `rw/r/<hold id>`, `rw/w/<hold id>` |
//! | semaphore | `sem/p/<permit id>` per permit held, `sem/total` = its permits |
//! | latch | `latch/count` = its count |
//! | election | `leader/<hold id>` = the candidate |
//!
//! Every contender's key is bound to a lease; the one created first holds. `/` and `%` in
//! names and ids are written `%2F` and `%25`, so no name's keys fall under another's.

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

    /// The key of `owner`'s hold (a fair waiter's place, for the fair lock) on `lock`.
    pub(crate) fn hold(&self, lock: LockRef<'_>, owner: &OwnerId) -> Vec<u8> {
        let folder = match lock.kind {
            LockKind::Read => "rw/r/",
            LockKind::Write => "rw/w/",
            LockKind::Semaphore => "sem/p/",
            kind => Family::of(kind).map_or("lock/", Family::folder),
        };
        self.under(&format!("{folder}{}", escape(owner.as_str())))
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

    /// The id at the end of a key of this name.
    pub(crate) fn id_of_key(key: &[u8]) -> String {
        let text = String::from_utf8_lossy(key);
        let last = text.rsplit('/').next().unwrap_or_default();
        last.replace("%2F", "/").replace("%25", "%")
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
        assert_eq!(key, b"a/rw/w/c:1");
        assert_eq!(a.family_of_key(&key), Some(Family::ReadWrite));
        assert_eq!(a.family_of_key(b"a/694d7b1e"), None);
        assert_eq!(NameKeys::id_of_key(&key), "c:1");
    }
}
