//! What is held on a backend now, one row per name, as `dlock top` and `dlock watch` show it:
//! read with the backends' inspection (SCAN on Redis, never KEYS), never written.

use std::time::Duration;

use dlocks::backend::{HeldAs, Inspection, LockHolder, LockInfo, NameInfo, SynchronizerInfo};

use crate::exit_code::Failure;

/// One name in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// `lock`, `read`, `write`, `fair`, `semaphore`, `latch` or `election`.
    pub kind: &'static str,
    /// Who holds it: `name@host pid` from the holder's client record, else its hold id (for
    /// several holders, the first and how many more). As stored: escape it to print it.
    pub holder: String,
    /// The ids of its holds (a lock's holders, a semaphore's permits, an election's leader):
    /// another id is another hold, even of the same process.
    pub holds: Vec<String>,
    /// How long the (longest-held) holder has held it, when its client's record says.
    pub held_for: Option<Duration>,
    /// How long its lease still runs.
    pub lease_left: Option<Duration>,
    /// Waiters the store knows of: a fair lock's queue, else the clients listening for its
    /// releases (where the store can count them).
    pub waiters: u64,
    /// What a synchronizer counts: `3/5 permits`, `count 2`, `token 7`.
    pub detail: String,
}

/// The names in use that match `pattern` (glob), at most `limit` of each sort.
pub fn take(store: &dyn Inspection, pattern: &str, limit: usize) -> Result<Vec<Entry>, Failure> {
    let locks = store.list_locks(pattern, limit)?;
    let synchronizers = store.list_synchronizers(pattern, limit)?;
    let mut entries: Vec<Entry> = locks.iter().map(of_lock).collect();
    entries.extend(synchronizers.iter().filter_map(of_synchronizer));
    Ok(entries)
}

/// One name, whatever it is in use as (`None` when it is free).
pub fn take_one(store: &dyn Inspection, name: &str) -> Result<Option<Entry>, Failure> {
    Ok(match store.inspect_name(name)? {
        NameInfo::Synchronizer(synchronizer) => of_synchronizer(&synchronizer),
        NameInfo::Lock(info) => info
            .is_held()
            .then(|| of_lock(&info))
            .or_else(|| queued(&info)),
        _ => None,
    })
}

/// A free lock with waiters still queued is shown too: someone is about to take it.
fn queued(info: &LockInfo) -> Option<Entry> {
    (info.queued_waiters > 0).then(|| of_lock(info))
}

fn of_lock(info: &LockInfo) -> Entry {
    let kind = match info.held_as {
        HeldAs::Read => "read",
        HeldAs::Write => "write",
        HeldAs::Fair => "fair",
        HeldAs::Exclusive | HeldAs::Free if info.queued_waiters > 0 => "fair",
        HeldAs::Fenced => "fenced",
        _ => "lock",
    };
    let held_for = info
        .holders
        .iter()
        .filter_map(|holder| holder.client.as_ref().and_then(|client| client.held_for))
        .max();
    let holder = match info.holders.as_slice() {
        [] => "-".to_owned(),
        [one] => who(one),
        [first, rest @ ..] => format!("{} +{} more", who(first), rest.len()),
    };
    Entry {
        name: info.name.clone(),
        kind,
        holder,
        holds: info
            .holders
            .iter()
            .map(|holder| holder.owner.clone())
            .collect(),
        held_for,
        lease_left: info.remaining_lease,
        waiters: match info.queued_waiters {
            0 => info.subscribers.unwrap_or(0),
            queued => queued,
        },
        detail: info
            .last_fencing_token
            .map(|token| format!("token {token}"))
            .unwrap_or_default(),
    }
}

/// `name@host pid` from the holder's client record, else its hold id.
pub fn who(holder: &LockHolder) -> String {
    match holder
        .client
        .as_ref()
        .and_then(|client| client.client.as_ref())
    {
        Some(client) if client.process_gone() => format!("{} (process gone)", client.label()),
        Some(client) => client.label(),
        None => holder.owner.clone(),
    }
}

fn of_synchronizer(info: &SynchronizerInfo) -> Option<Entry> {
    if let Some(leader) = &info.leader {
        return Some(Entry {
            name: info.name.clone(),
            kind: "election",
            holder: leader.candidate.clone(),
            holds: vec![leader.owner.clone()],
            held_for: None,
            lease_left: leader.remaining_lease,
            waiters: 0,
            detail: format!("token {}", leader.token),
        });
    }
    if !info.permits_held.is_empty() {
        let held = info.permits_held.len() as i64;
        let total = held + info.count.unwrap_or(0);
        return Some(Entry {
            name: info.name.clone(),
            kind: "semaphore",
            holder: permits(held),
            holds: info
                .permits_held
                .iter()
                .map(|permit| permit.id.clone())
                .collect(),
            held_for: None,
            lease_left: info
                .permits_held
                .iter()
                .filter_map(|permit| permit.remaining_lease)
                .max(),
            waiters: 0,
            detail: format!("{held}/{}", permits(total)),
        });
    }
    let count = info.count?;
    let kind = match info.counts.as_deref() {
        Some("semaphore") => "semaphore",
        _ => "latch",
    };
    Some(Entry {
        name: info.name.clone(),
        kind,
        holder: "-".to_owned(),
        holds: Vec::new(),
        held_for: None,
        lease_left: None,
        waiters: 0,
        detail: match kind {
            "semaphore" => format!("{count} available"),
            _ => format!("count {count}"),
        },
    })
}

/// `1 permit`, `2 permits`.
fn permits(count: i64) -> String {
    if count == 1 {
        "1 permit".to_owned()
    } else {
        format!("{count} permits")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_permit_is_one_permit() {
        assert_eq!(super::permits(1), "1 permit");
        assert_eq!(super::permits(3), "3 permits");
    }
}
