//! Who a client is, kept in the store next to its holds, so that an operator asking "who holds
//! this lock, and since when?" gets a program's name, host and pid rather than a UUID.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::contract::kind::LockRef;
use crate::contract::lock_info::LockInfo;
use crate::contract::owner::OwnerId;

/// A client as the store keeps it: its id (the first part of every hold id it uses), the name
/// the program gave it, and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ClientRecord {
    /// The client id ([`LockClient::id`](crate::LockClient::id)).
    pub id: String,
    /// The name the program gave it ([`LockClientBuilder::name`](crate::LockClientBuilder::name);
    /// by default the program's own name).
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
}

impl ClientRecord {
    /// A record, as a backend reads it back.
    pub fn new(id: String, name: String, host: String, pid: u32) -> Self {
        ClientRecord {
            id,
            name,
            host,
            pid,
        }
    }

    /// `name@host pid`, as operators read it.
    pub fn label(&self) -> String {
        format!("{}@{} {}", self.name, self.host, self.pid)
    }

    /// Whether the client's process is known to be gone: it ran on this host, and no process
    /// has its pid now (on Linux). A holder killed with `kill -9` keeps its lock until its
    /// lease runs out; this tells an operator on its host that nobody is behind it. `false`
    /// when it cannot be told (another host, another system).
    pub fn process_gone(&self) -> bool {
        cfg!(target_os = "linux")
            && self.host == host_name()
            && !std::path::Path::new("/proc")
                .join(self.pid.to_string())
                .exists()
    }
}

/// One of a client's holds in its record: which lock, which hold, and when it was taken.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HeldSince<'a> {
    /// The lock.
    pub lock: LockRef<'a>,
    /// The hold's id on the store.
    pub owner: &'a OwnerId,
    /// When it was taken, on this machine's wall clock.
    pub since: SystemTime,
}

impl<'a> HeldSince<'a> {
    /// The hold `owner` of `lock`, taken at `since`.
    pub fn new(lock: LockRef<'a>, owner: &'a OwnerId, since: SystemTime) -> Self {
        HeldSince { lock, owner, since }
    }
}

/// What a client's record says about one holder of a lock, as inspection reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HolderClient {
    /// The client that holds it, if its record is still in the store (a client that died
    /// keeps it until its last refresh runs out).
    pub client: Option<ClientRecord>,
    /// How long the hold has been held, if the record names it (a hold younger than the
    /// record's last refresh is not in it yet).
    pub held_for: Option<Duration>,
}

impl HolderClient {
    /// What a record says of a holder.
    pub fn new(client: Option<ClientRecord>, held_for: Option<Duration>) -> Self {
        HolderClient { client, held_for }
    }
}

/// A client's record as a backend reads it back: who the client is, and when each of its
/// holds (by hold id) was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredRecord {
    /// The client.
    pub client: ClientRecord,
    /// When each of its holds was taken, by hold id.
    pub since: HashMap<String, SystemTime>,
}

impl StoredRecord {
    /// A record read back.
    pub fn new(client: ClientRecord, since: HashMap<String, SystemTime>) -> Self {
        StoredRecord { client, since }
    }
}

/// The ids of the clients holding `locks`, each once, sorted: the records inspection reads.
pub fn holder_client_ids(locks: &[LockInfo]) -> Vec<String> {
    let mut ids: Vec<String> = locks
        .iter()
        .flat_map(|lock| {
            lock.holders
                .iter()
                .map(|holder| holder.client_id().to_owned())
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Tells each holder of `locks` what `records` (those found) say of it: its client, and how
/// long it has held as of `now`. A holder whose client has no record gets `client: None`.
pub fn attach_records(locks: &mut [LockInfo], records: &[StoredRecord], now: SystemTime) {
    let records: HashMap<&str, &StoredRecord> = records
        .iter()
        .map(|record| (record.client.id.as_str(), record))
        .collect();
    for lock in locks {
        for holder in &mut lock.holders {
            let record = records.get(holder.client_id());
            holder.client = Some(HolderClient::new(
                record.map(|record| record.client.clone()),
                record
                    .and_then(|record| record.since.get(&holder.owner))
                    .map(|since| now.duration_since(*since).unwrap_or_default()),
            ));
        }
    }
}

/// This process's defaults for a client record: the program's name, the host name and the
/// process id.
pub(crate) fn program_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| {
            path.file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
        })
        .or_else(|| {
            std::env::args().next().and_then(|arg0| {
                std::path::Path::new(&arg0)
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
            })
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The name of the host this process runs on, or `unknown`.
pub(crate) fn host_name() -> String {
    #[cfg(target_os = "linux")]
    {
        if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            let name = name.trim();
            if !name.is_empty() {
                return name.to_owned();
            }
        }
    }
    std::env::var("HOSTNAME")
        .or_else(|_| std::env::var("COMPUTERNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
