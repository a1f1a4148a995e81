//! The inspection calls of [`RedisBackend`]: what the server holds for a lock or a
//! synchronizer, and the ones held now, for people and tools (`dlock status`); nothing taken.

use dlock_core::backend::{validate_listing, Inspection, LockInfo, SynchronizerInfo};
use dlock_core::LockError;
use redis::Value;

use super::{RedisBackend, Store, RENEW_CHUNK};
use crate::commands::Retry;
use crate::inspect;
use crate::keys;
use crate::synchronizer_info;

impl RedisBackend {
    /// What the server holds for lock `name` now: holders, remaining lease, queued fair
    /// waiters, the last fencing token (one round trip, nothing taken). A key of that name that
    /// is not a lock is `LockError::InvalidArgument`.
    ///
    /// The answer is for people and tools (`dlock status`); it is stale once read, so a program
    /// that needs the lock should ask for it instead.
    pub fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        dlock_core::backend::validate_name(name)?;
        let names = [name.to_owned()];
        let replies = self.inspect_names(&names)?;
        let mut info = inspect::parse(&names, replies)?
            .pop()
            .unwrap_or_else(|| Err(LockError::protocol("no reply to a lock inspection")))
            .map_err(|error| error.on_lock(name))?;
        self.attach_clients(std::slice::from_mut(&mut info))?;
        Ok(info)
    }

    /// The locks held now whose names match `pattern` (Redis glob syntax: `*`, `?`, `[ab]`),
    /// sorted by name, at most `limit` of them. Found with `SCAN ... TYPE hash`, never `KEYS`,
    /// so a large keyspace costs several round trips but never blocks the server; hashes that
    /// are not locks are left out.
    pub fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        validate_listing(pattern, limit)?;
        let names = match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with("a lock scan", Retry::OnDroppedConnection, |con| {
                    inspect::scan(|cmd| cmd.query(con), pattern, limit)
                })?
            }
            Store::Cluster(cluster) => {
                let mut names = cluster.scan_keys(pattern, "hash", limit)?;
                names.retain(|key| !inspect::is_derived_key(key));
                names
            }
        };
        let mut locks = Vec::with_capacity(names.len());
        for chunk in names.chunks(RENEW_CHUNK) {
            let replies = self.inspect_names(chunk)?;
            // A hash that is not a lock, or a lock released since the scan, is not listed.
            locks.extend(
                inspect::parse(chunk, replies)?
                    .into_iter()
                    .filter_map(Result::ok)
                    .filter(LockInfo::is_held),
            );
        }
        self.attach_clients(&mut locks)?;
        Ok(locks)
    }

    /// What the server holds for `name` as a semaphore (its available permits and the permits
    /// held), a latch (its count) and a leader election (its leader), in one round trip,
    /// nothing taken. For people and tools (`dlock status`); stale once read.
    pub fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        dlock_core::backend::validate_name(name)?;
        let what = "a synchronizer inspection";
        let replies = match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| {
                    synchronizer_info::inspect(con, name)
                })
            }
            Store::Cluster(cluster) => {
                cluster
                    .commands
                    .run_with(what, Retry::OnDroppedConnection, |con| {
                        synchronizer_info::inspect(&mut con.con, name)
                    })
            }
        }?;
        synchronizer_info::parse(name, replies).map_err(|error| error.on_lock(name))
    }

    /// The semaphores with permits held and the elections with a leader now, whose names match
    /// `pattern` (Redis glob syntax), sorted by name, at most `limit` of them; found with `SCAN`.
    pub fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        validate_listing(pattern, limit)?;
        // Semaphores by their permits held, elections among the hashes of matching names.
        let scans: [(String, &str, Option<&str>); 2] = [
            (keys::suffixed(pattern, "timeout"), "zset", Some("timeout")),
            (pattern.to_owned(), "hash", None),
        ];
        let mut names = Vec::new();
        for (matching, kind, suffix) in scans {
            let found = match &self.inner.store {
                Store::Server { commands, .. } => {
                    commands.run_with("a synchronizer scan", Retry::OnDroppedConnection, |con| {
                        inspect::scan_keys(|cmd| cmd.query(con), &matching, kind, limit)
                    })?
                }
                Store::Cluster(cluster) => cluster.scan_keys(&matching, kind, limit)?,
            };
            names.extend(found.iter().filter_map(|key| match suffix {
                Some(suffix) => keys::base_name(key, None, Some(suffix)),
                None => (!inspect::is_derived_key(key)).then(|| key.clone()),
            }));
        }
        names.sort();
        names.dedup();
        names.truncate(limit);
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            let info = self.inspect_synchronizer(&name)?;
            if info.is_in_use() {
                found.push(info);
            }
        }
        Ok(found)
    }

    /// Reads `names` for [`inspect::parse`]: one pipeline (on a cluster, one per name).
    fn inspect_names(&self, names: &[String]) -> Result<Vec<Value>, LockError> {
        let what = "a lock inspection";
        match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| {
                    inspect::inspect(con, names, false)
                })
            }
            Store::Cluster(cluster) => {
                let mut replies = Vec::with_capacity(names.len() * 6);
                for name in names {
                    replies.extend(cluster.commands.run_with(
                        what,
                        Retry::OnDroppedConnection,
                        |con| inspect::inspect(&mut con.con, std::slice::from_ref(name), true),
                    )?);
                }
                Ok(replies)
            }
        }
    }
}

/// The inspection hook of the contract ([`DistributedLock::inspection`]), by the calls above.
///
/// [`DistributedLock::inspection`]: dlock_core::backend::DistributedLock::inspection
impl Inspection for RedisBackend {
    fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        RedisBackend::inspect(self, name)
    }

    fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        RedisBackend::inspect_synchronizer(self, name)
    }

    fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        RedisBackend::list_locks(self, pattern, limit)
    }

    fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        RedisBackend::list_synchronizers(self, pattern, limit)
    }
}
