//! Client records on etcd: one key per client, `<namespace>dlock-client:<client id>`, whose
//! value is the client's name, host and pid and the start of each hold it names (Unix
//! milliseconds), as JSON; bound to a lease of the record's own, which each publication keeps
//! alive for the record's time to live, so the record goes when its client stops refreshing
//! it. Inspection joins holders to their clients' records by the client id that starts each
//! hold id: `dlock status` tells who holds a lock, and since when.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock_core::backend::{
    attach_records, holder_client_ids, ClientRecord, HeldSince, LockInfo, StoredRecord,
};
use dlock_core::LockError;
use serde_json::{json, Value};

use crate::backend::Inner;
use crate::keys::escape_field;
use crate::transport::Fail;
use crate::wire::{put, range, Span, OPS_PER_TXN};

impl Inner {
    fn client_key(&self, id: &str) -> Vec<u8> {
        format!("{}dlock-client:{}", self.namespace, escape_field(id)).into_bytes()
    }

    /// Replaces `client`'s record with one naming `holds`, lasting `ttl` unless published
    /// again (one keep-alive of the record's lease, one put).
    pub(crate) fn publish_client(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        let held: serde_json::Map<String, Value> = holds
            .iter()
            .map(|hold| {
                (
                    hold.owner.as_str().to_owned(),
                    json!(unix_millis(hold.since)),
                )
            })
            .collect();
        let value = json!({
            "name": client.name,
            "host": client.host,
            "pid": client.pid,
            "holds": held,
        })
        .to_string();
        let key = self.client_key(&client.id);
        for _ in 0..2 {
            let lease = self.leases.record_lease(&client.id, ttl)?;
            match self.write(
                Vec::new(),
                vec![put(&key, value.as_bytes(), lease.id)],
                Vec::new(),
            ) {
                // Its lease ran out between the keep-alive and the put: a new one.
                Err(Fail::LeaseNotFound) => self.leases.forget_record_lease(&client.id),
                other => return other.map(drop).map_err(LockError::from),
            }
        }
        Err(LockError::protocol(
            "etcd lost a client record's lease twice in a row",
        ))
    }

    /// Fills in each holder's client (name, host, pid) and how long it has held, from the
    /// records of the clients that hold `locks`. Without them (a user whose rights do not reach
    /// them, a call that failed) the holders are still shown, by their hold ids.
    pub(crate) fn attach_clients(&self, locks: &mut [LockInfo]) {
        let ids = holder_client_ids(locks);
        let mut records = Vec::new();
        for chunk in ids.chunks(OPS_PER_TXN) {
            let ops = chunk
                .iter()
                .map(|id| range(&Span::key(&self.client_key(id))))
                .collect();
            let answer = match self.read(ops) {
                Ok(answer) => answer,
                Err(error) => {
                    tracing::debug!(%error, "dlock: the holders' client records were not read");
                    return;
                }
            };
            for (at, id) in chunk.iter().enumerate() {
                let found = answer.kvs(at).ok().and_then(|kvs| kvs.into_iter().next());
                if let Some(record) = found.and_then(|kv| parse_record(id, &kv.value)) {
                    records.push(record);
                }
            }
        }
        attach_records(locks, &records, SystemTime::now());
    }
}

/// The record `value` says, or `None` if it is not one.
fn parse_record(id: &str, value: &[u8]) -> Option<StoredRecord> {
    let value: Value = serde_json::from_slice(value).ok()?;
    let since: HashMap<String, SystemTime> = value["holds"]
        .as_object()?
        .iter()
        .filter_map(|(owner, millis)| {
            Some((
                owner.clone(),
                UNIX_EPOCH + Duration::from_millis(millis.as_u64()?),
            ))
        })
        .collect();
    let client = ClientRecord::new(
        id.to_owned(),
        value["name"].as_str()?.to_owned(),
        value["host"].as_str()?.to_owned(),
        u32::try_from(value["pid"].as_u64()?).ok()?,
    );
    Some(StoredRecord::new(client, since))
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}
