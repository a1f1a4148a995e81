//! Client records on Redis: one hash per client, `dlock_client:{<client id>}`, with fields
//! `name`, `host`, `pid` and `hold:<hold id>` (the hold's start, Unix milliseconds), replaced
//! whole at each publication and expiring with its time to live. The lock hashes stay as
//! Redisson lays them out; inspection joins a lock's holders to their clients' records by the
//! client id that starts each hold id.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock_core::backend::{
    attach_records, holder_client_ids, ClientRecord, HeldSince, LockInfo, StoredRecord,
};
use dlock_core::LockError;
use redis::{ConnectionLike, RedisResult, Value};

use super::{RedisBackend, Store};
use crate::commands::Retry;
use crate::keys::client_record_name;
use crate::scripts::CLIENT_RECORD_PUBLISH;

/// The field of a hold's start in a client's record.
const HOLD_FIELD_PREFIX: &str = "hold:";

impl RedisBackend {
    /// Replaces `client`'s record with one naming `holds`, expiring after `ttl`: one
    /// `MULTI` block, so a reader sees the old record or the new one.
    pub(crate) fn publish_record(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        let key = client_record_name(&client.id);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut args = vec![
            ttl_ms.to_string(),
            "name".into(),
            client.name.clone(),
            "host".into(),
            client.host.clone(),
            "pid".into(),
            client.pid.to_string(),
        ];
        for hold in holds {
            args.push(format!("{HOLD_FIELD_PREFIX}{}", hold.owner));
            args.push(unix_millis(hold.since).to_string());
        }
        let publish = |con: &mut dyn ConnectionLike| -> RedisResult<()> {
            CLIENT_RECORD_PUBLISH
                .invoke::<i64>(con, &[&key], &args)
                .map(drop)
        };
        let what = "a client record";
        match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| publish(con))
            }
            Store::Cluster(cluster) => {
                cluster
                    .commands
                    .run_with(what, Retry::OnDroppedConnection, |con| {
                        publish(&mut con.con)
                    })
            }
        }
    }

    /// Fills in each holder's client (name, host, pid) and how long it has held, from the
    /// records of the clients that hold `locks`: one round trip (one per client on a cluster).
    pub(crate) fn attach_clients(&self, locks: &mut [LockInfo]) -> Result<(), LockError> {
        let ids = holder_client_ids(locks);
        if ids.is_empty() {
            return Ok(());
        }
        let read = |con: &mut dyn ConnectionLike, ids: &[String]| -> RedisResult<Vec<Value>> {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.cmd("HGETALL").arg(client_record_name(id));
            }
            pipe.query(con)
        };
        let what = "the holders' client records";
        let replies = match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| read(con, &ids))
            }
            Store::Cluster(cluster) => ids.iter().try_fold(Vec::new(), |mut replies, id| {
                replies.extend(cluster.commands.run_with(
                    what,
                    Retry::OnDroppedConnection,
                    |con| read(&mut con.con, std::slice::from_ref(id)),
                )?);
                Ok::<_, LockError>(replies)
            }),
        };
        // The records say who holds; without them (a user whose rights do not reach them, a
        // call that failed) the holders are still shown, by their hold ids.
        let replies = match replies {
            Ok(replies) => replies,
            Err(error) => {
                tracing::debug!(%error, "dlock: the holders' client records were not read");
                return Ok(());
            }
        };
        let records: Vec<StoredRecord> = ids
            .iter()
            .zip(replies)
            .filter_map(|(id, reply)| parse_record(id, reply))
            .collect();
        attach_records(locks, &records, SystemTime::now());
        Ok(())
    }
}

/// The record in `reply` (an `HGETALL`), or `None` if there is none (the client is gone, or
/// never published one: a Redisson client, or one on another store) or it is not one.
fn parse_record(id: &str, reply: Value) -> Option<StoredRecord> {
    let fields: HashMap<String, String> = redis::from_redis_value(reply).ok()?;
    let pid = fields.get("pid")?.parse().ok()?;
    let since = fields
        .iter()
        .filter_map(|(field, value)| {
            let owner = field.strip_prefix(HOLD_FIELD_PREFIX)?;
            let millis: u64 = value.parse().ok()?;
            Some((owner.to_owned(), UNIX_EPOCH + Duration::from_millis(millis)))
        })
        .collect();
    let client = ClientRecord::new(
        id.to_owned(),
        fields.get("name")?.clone(),
        fields.get("host")?.clone(),
        pid,
    );
    Some(StoredRecord::new(client, since))
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}
