//! The inspection hook ([`Inspection`]) on etcd: what the cluster holds for a name, read from
//! its keys (the holder is the key created first, its token that key's create revision) and
//! its leases, for people and tools (`dlock status`, `list`). Nothing is written.
//!
//! etcd keeps no record of the clients (no `holder.client`): a hold's id and its lease are all
//! the keys tell. A listing scans the namespace's keys (keys only, in pages) and matches the
//! names they are under, since etcd filters by prefix only.

use std::collections::HashMap;
use std::time::Duration;

use dlock_core::backend::{
    validate_listing, validate_name, HeldAs, Inspection, LeaderInfo, LockHolder, LockInfo,
    PermitInfo, SynchronizerInfo,
};
use dlock_core::LockError;
use serde_json::json;

use crate::backend::Inner;
use crate::keys::{unescape, Family, NameKeys};
use crate::steps::is_place;
use crate::transport::Resend;
use crate::wire::{b64, first_created, prefix_end, Json, Kv};
use crate::EtcdBackend;

/// Keys read per page of a listing's scan.
const SCAN_PAGE: i64 = 1000;

/// The most pages a listing scans (ten million keys): a bound, not a limit anyone meets.
const SCAN_PAGES: usize = 10_000;

/// A name a listing's scan found, with the folders its keys are in (`None`: a leased key of
/// another etcd program).
type FoundName = (String, Vec<Option<Family>>);

/// A name's live keys, each with the folder it is in, in create-revision order.
struct NameKeysRead {
    keys: NameKeys,
    kvs: Vec<(Option<Family>, Kv)>,
}

impl NameKeysRead {
    fn of(&self, family: Family) -> impl Iterator<Item = &Kv> {
        self.kvs
            .iter()
            .filter(move |(f, _)| *f == Some(family))
            .map(|(_, kv)| kv)
    }

    /// The part of `kv`'s key after `folder` (an id, unescaped).
    fn id(&self, kv: &Kv) -> String {
        let rest = kv.key.get(self.keys.prefix.len()..).unwrap_or_default();
        let last = rest.rsplit(|byte| *byte == b'/').next().unwrap_or(rest);
        unescape(&String::from_utf8_lossy(last))
    }
}

impl Inner {
    /// Every live key of `name` (one read), in create-revision order.
    fn read_name(&self, name: &str) -> Result<NameKeysRead, LockError> {
        validate_name(name)?;
        let keys = self.keys(name);
        let over = self.over(name)?;
        let answer = self.read(vec![first_created(&keys.all(), 0)])?;
        let kvs = over
            .live(answer.kvs(0)?)
            .into_iter()
            .map(|kv| (keys.family_of_key(&kv.key), kv))
            .collect();
        Ok(NameKeysRead { keys, kvs })
    }

    /// How long the hold at `kv` still runs, as shown to people. A key bound to a lease etcd
    /// no longer has is being deleted (etcd revokes an expired lease, then deletes its keys):
    /// no time left, not "no lease".
    fn lease_left(&self, kv: &Kv) -> Result<Option<Duration>, LockError> {
        Ok(match self.remaining_of(kv)? {
            None if kv.lease != 0 => Some(Duration::ZERO),
            left => left,
        })
    }

    /// How long the leases of `kvs` still run, asked once per lease.
    fn remaining_all<'a>(
        &self,
        kvs: impl Iterator<Item = &'a Kv>,
    ) -> Result<Vec<Option<Duration>>, LockError> {
        let mut by_lease: HashMap<i64, Option<Duration>> = HashMap::new();
        let mut remaining = Vec::new();
        for kv in kvs {
            let left = match by_lease.get(&kv.lease) {
                Some(left) if self.holds.holder_of_key(&kv.key).is_none() => *left,
                _ => {
                    let left = self.lease_left(kv)?;
                    by_lease.insert(kv.lease, left);
                    left
                }
            };
            remaining.push(left);
        }
        Ok(remaining)
    }

    /// The token of the hold at `kv`: the revision that made it, as this backend recorded
    /// it, else the key's create revision.
    fn token_of(&self, kv: &Kv) -> u64 {
        self.holds
            .holder_of_key(&kv.key)
            .and_then(|(_, record)| record.made_at)
            .unwrap_or(kv.create_revision)
            .unsigned_abs()
    }

    pub(crate) fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let read = self.read_name(name)?;
        let mut info = LockInfo::free(name);
        let Some((family, first)) = read.kvs.first() else {
            return Ok(info);
        };
        match family {
            Some(Family::Semaphore | Family::Latch | Family::Election) => {
                return Err(LockError::invalid(
                    "name",
                    format!(
                        "{name:?} is in use as {}, not as a lock",
                        family.map_or("a lock", Family::describe)
                    ),
                ));
            }
            Some(Family::ReadWrite) => {
                let writer = read.of(Family::ReadWrite).find(|kv| {
                    kv.key
                        .starts_with(&read.keys.side(dlock_core::LockKind::Write).key)
                });
                let readers: Vec<&Kv> = read
                    .of(Family::ReadWrite)
                    .filter(|kv| {
                        kv.key
                            .starts_with(&read.keys.side(dlock_core::LockKind::Read).key)
                    })
                    .collect();
                if let Some(writer) = writer {
                    info.held_as = HeldAs::Write;
                    info.holders
                        .push(LockHolder::new(writer.value_text(), 1, true));
                } else if !readers.is_empty() {
                    info.held_as = HeldAs::Read;
                }
                for reader in &readers {
                    info.holders
                        .push(LockHolder::new(read.id(reader), 1, false));
                }
                let held = writer.into_iter().chain(readers.iter().copied());
                info.remaining_lease = self.remaining_all(held)?.into_iter().flatten().max();
            }
            // The fair lock: the first key holds once its waiter took it (its value is the
            // hold's id); until then it is the place of the queue's head.
            Some(Family::Fair) => {
                let held = !is_place(&read.keys, first);
                info.queued_waiters = read.kvs.len().saturating_sub(usize::from(held)) as u64;
                if held {
                    info.held_as = HeldAs::Fair;
                    info.holders
                        .push(LockHolder::new(first.value_text(), 1, false));
                    info.remaining_lease = self.lease_left(first)?;
                }
            }
            // A reentrant or fenced lock, or etcd's own `Mutex` (a key named by its lease, the
            // value empty): the first key holds, the others are contenders queued behind it.
            Some(Family::Lock) | None => {
                let owner = match first.value_text() {
                    value if value.is_empty() => read.id(first),
                    value => value,
                };
                info.held_as = HeldAs::Exclusive;
                info.holders.push(LockHolder::new(owner, 1, false));
                info.remaining_lease = self.lease_left(first)?;
                info.queued_waiters = read.kvs.len().saturating_sub(1) as u64;
                info.last_fencing_token = Some(self.token_of(first));
            }
        }
        Ok(info)
    }

    pub(crate) fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        let read = self.read_name(name)?;
        let mut info = SynchronizerInfo::new(name);
        let permits: Vec<&Kv> = read
            .of(Family::Semaphore)
            .filter(|kv| kv.key != read.keys.total())
            .collect();
        let left = self.remaining_all(permits.iter().copied())?;
        info.permits_held = permits
            .iter()
            .zip(left)
            .map(|(kv, left)| PermitInfo::new(read.id(kv), left))
            .collect();
        if let Some(total) = read
            .of(Family::Semaphore)
            .find(|kv| kv.key == read.keys.total())
        {
            let total: i64 = total.value_text().trim().parse().unwrap_or(0);
            info.count = Some(total.saturating_sub(permits.len() as i64).max(0));
            info.counts = Some("semaphore".to_owned());
        }
        if let Some(count) = read
            .of(Family::Latch)
            .find(|kv| kv.key == read.keys.count())
        {
            info.count = Some(count.value_text().trim().parse().unwrap_or(0));
            info.counts = Some("latch".to_owned());
        }
        if let Some(leader) = read.of(Family::Election).next() {
            info.leader = Some(LeaderInfo::new(
                leader.value_text(),
                read.id(leader),
                self.token_of(leader),
                self.lease_left(leader)?,
            ));
        }
        Ok(info)
    }

    /// The names with keys in the namespace that match `pattern`, sorted, with the folders
    /// their keys are in (`None`: a leased key of another etcd program).
    fn scan_names(&self, pattern: &str) -> Result<Vec<FoundName>, LockError> {
        let namespace = self.namespace.as_bytes();
        let (mut from, end) = if namespace.is_empty() {
            (vec![0u8], vec![0u8])
        } else {
            (namespace.to_vec(), prefix_end(namespace))
        };
        let mut names: HashMap<String, Vec<Option<Family>>> = HashMap::new();
        for _ in 0..SCAN_PAGES {
            let answer = self
                .transport
                .call(
                    "/v3/kv/range",
                    &Json::from(json!({
                        "key": b64(&from),
                        "range_end": b64(&end),
                        "keys_only": true,
                        "limit": SCAN_PAGE.to_string(),
                    })),
                    Resend::Safe,
                )
                .map_err(LockError::from)?;
            let kvs: Vec<Kv> = answer["kvs"]
                .as_array()
                .map(|kvs| kvs.iter().map(Kv::parse).collect())
                .unwrap_or_default();
            for kv in &kvs {
                let rest = &kv.key[namespace.len().min(kv.key.len())..];
                // Keys with no `/` are outside every name (tombstones, set-once answers).
                let Some(slash) = rest.iter().position(|byte| *byte == b'/') else {
                    continue;
                };
                let name = unescape(&String::from_utf8_lossy(&rest[..slash]));
                if name.is_empty() || !crate::glob::matches(pattern, &name) {
                    continue;
                }
                let family = NameKeys::new(&self.namespace, &name).family_of_key(&kv.key);
                // A key outside dlock's folders counts only when leased (etcd's `Mutex` and
                // `Election` contenders are): plain keys are another program's data.
                if family.is_none() && kv.lease == 0 {
                    continue;
                }
                let families = names.entry(name).or_default();
                if !families.contains(&family) {
                    families.push(family);
                }
            }
            match kvs.last() {
                Some(last) if answer["more"].as_bool().unwrap_or(false) => {
                    from = last.key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        let mut names: Vec<FoundName> = names.into_iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }

    pub(crate) fn list_locks(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<LockInfo>, LockError> {
        validate_listing(pattern, limit)?;
        let mut locks = Vec::new();
        for (name, _) in self.scan_names(pattern)? {
            if locks.len() == limit {
                break;
            }
            // A name in use as a synchronizer, or released since the scan, is not listed.
            if let Ok(info) = self.inspect(&name) {
                if info.is_held() {
                    locks.push(info);
                }
            }
        }
        Ok(locks)
    }

    pub(crate) fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        validate_listing(pattern, limit)?;
        let mut found = Vec::new();
        for (name, families) in self.scan_names(pattern)? {
            if found.len() == limit {
                break;
            }
            let synchronizer = families.iter().any(|family| {
                matches!(
                    family,
                    Some(Family::Semaphore | Family::Latch | Family::Election)
                )
            });
            if !synchronizer {
                continue;
            }
            let info = self.inspect_synchronizer(&name)?;
            if info.is_in_use() {
                found.push(info);
            }
        }
        Ok(found)
    }
}

/// Reads the cluster's keys and leases, and the holders' client records.
impl Inspection for EtcdBackend {
    /// A whole second (etcd's `TTL` is cut down to one) and the lessor's half-second round.
    fn lease_resolution(&self) -> Duration {
        Duration::from_millis(1500)
    }

    fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let mut info = self.inner.inspect(name).map_err(|e| e.on_lock(name))?;
        self.inner.attach_clients(std::slice::from_mut(&mut info));
        Ok(info)
    }

    fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        self.inner
            .inspect_synchronizer(name)
            .map_err(|e| e.on_lock(name))
    }

    fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let mut locks = self.inner.list_locks(pattern, limit)?;
        self.inner.attach_clients(&mut locks);
        Ok(locks)
    }

    fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        self.inner.list_synchronizers(pattern, limit)
    }
}
