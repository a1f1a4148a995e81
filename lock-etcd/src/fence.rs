//! The fence where the data lives, when the data lives in etcd: a write made in a transaction
//! that compares the hold's key, so it is made only while the hold is still the holder (etcd's
//! own `Mutex.IsOwner()`).
//!
//! A fenced hold on etcd is a key created by the acquire's transaction: its fencing token is
//! that key's create revision, and the key lives exactly as long as the hold (released, lost
//! with its lease, or force-unlocked, it is deleted; a later hold makes a new one with a higher
//! revision). So `create_revision(key) == token` in a transaction's compare admits the hold's
//! own writes and refuses a late one, atomically with the write, whatever etcd client the
//! writer uses: [`OwnerCompare`] gives the key and the revision, as etcd's gateway takes them
//! and as `etcdctl txn` does.
//!
//! # Examples
//!
//! ```no_run
//! use dlock_core::LockClient;
//! use dlock_etcd::EtcdBackend;
//!
//! let backend = EtcdBackend::builder("http://127.0.0.1:2379").build()?;
//! let client = LockClient::new(backend.clone());
//! let guard = client.fenced_lock("report").lock()?;
//! let owner = backend.owner_compare(&guard);
//! // In the writer's own transaction: compare `owner.etcdctl()` (or `owner.to_json()`), then
//! // put the data; a hold that is over makes the comparison fail and nothing is written.
//! println!("{}", owner.etcdctl());
//! guard.unlock()?;
//! # Ok::<(), dlock_core::LockError>(())
//! ```

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use dlock_core::backend::{LockRef, OwnerId};
use dlock_core::{FencedLockGuard, LockKind};
use serde_json::{json, Value};

use crate::backend::EtcdBackend;

/// What a write compares to be made only while a fenced hold lasts: the hold's key and its
/// create revision (the hold's fencing token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerCompare {
    key: Vec<u8>,
    create_revision: u64,
}

impl OwnerCompare {
    /// The hold's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The create revision the key must still have: the hold's fencing token.
    pub fn create_revision(&self) -> u64 {
        self.create_revision
    }

    /// The comparison as etcd's JSON gateway takes it in `/v3/kv/txn`'s `compare` list.
    pub fn to_json(&self) -> Value {
        json!({
            "key": STANDARD.encode(&self.key),
            "target": "CREATE",
            "result": "EQUAL",
            "create_revision": self.create_revision.to_string(),
        })
    }

    /// The comparison as `etcdctl txn` reads it: `create("<key>") = "<revision>"`, the key
    /// quoted as Go quotes a string (`\"`, `\\`, and `\xNN` for any byte that is not printable
    /// ASCII).
    pub fn etcdctl(&self) -> String {
        let mut key = String::new();
        for &byte in &self.key {
            match byte {
                b'"' | b'\\' => {
                    key.push('\\');
                    key.push(char::from(byte));
                }
                b' '..=b'~' => key.push(char::from(byte)),
                _ => key.push_str(&format!("\\x{byte:02x}")),
            }
        }
        format!("create(\"{key}\") = \"{}\"", self.create_revision)
    }
}

impl EtcdBackend {
    /// The comparison that admits writes of `guard`'s hold only while it lasts, for the
    /// writer's own etcd transaction (see [`crate::fence`]). `guard` is a hold taken through
    /// this backend.
    pub fn owner_compare(&self, guard: &FencedLockGuard) -> OwnerCompare {
        let name = guard.name();
        let owner = OwnerId::from_raw(guard.owner().to_owned());
        OwnerCompare {
            key: self
                .inner
                .keys(name)
                .hold(LockRef::new(name, LockKind::Fenced), &owner),
            create_revision: guard.token(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_reads_as_etcdctl_and_the_gateway_take_it() {
        let owner = OwnerCompare {
            key: b"app/a \"b\"\\c\x01/lock/7".to_vec(),
            create_revision: 42,
        };
        assert_eq!(
            owner.etcdctl(),
            r#"create("app/a \"b\"\\c\x01/lock/7") = "42""#
        );
        assert_eq!(
            owner.to_json(),
            json!({
                "key": STANDARD.encode(b"app/a \"b\"\\c\x01/lock/7"),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": "42",
            })
        );
    }
}
