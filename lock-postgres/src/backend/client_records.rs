//! Client records in PostgreSQL: one row per client in the schema's `clients` table, replaced
//! whole at each publication. Inspection joins a lock's holders to their clients' rows by the
//! client id that starts each hold id.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock_core::backend::{
    attach_records, holder_client_ids, ClientRecord, HeldSince, LockInfo, StoredRecord,
};
use dlock_core::LockError;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::PostgresBackend;
use crate::connection::Sql;
use crate::error::to_lock_error;
use crate::pool::{Retry, StepFailure};
use crate::schema::quoted;

/// The statements' indexes in a connection's prepared statements: apart from the steps' and
/// the inspection's.
const PUBLISH_INDEX: usize = usize::MAX - 2;
const READ_INDEX: usize = usize::MAX - 3;

impl PostgresBackend {
    /// Replaces `client`'s row with one naming `holds`, expiring after `ttl`; rows of other
    /// clients that expired are deleted on the way, so dead clients leave nothing behind.
    ///
    /// Committed with `synchronous_commit = off` whatever the lock steps' durability: a record
    /// lost in a crash is written again within a refresh, and a synchronous commit would flush
    /// the asynchronous lock steps before it (making `Durability::Off` other than it says).
    pub(crate) fn publish_record(
        &self,
        client: &ClientRecord,
        holds: &[HeldSince<'_>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        let s = quoted(self.schema());
        let text = format!(
            "WITH quiet AS (SELECT set_config('synchronous_commit', 'off', true)), \
                  gone AS (DELETE FROM {s}.clients WHERE expires_at < clock_timestamp() \
                             AND id <> $1) \
             INSERT INTO {s}.clients (id, name, host, pid, holds, since_us, expires_at) \
             SELECT $1, $2, $3, $4, $5, $6, clock_timestamp() + $7 * interval '1 microsecond' \
             FROM quiet \
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, host = EXCLUDED.host, \
               pid = EXCLUDED.pid, holds = EXCLUDED.holds, since_us = EXCLUDED.since_us, \
               expires_at = EXCLUDED.expires_at"
        );
        let sql = Sql {
            index: PUBLISH_INDEX,
            text: &text,
            types: &[
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::INT4,
                Type::TEXT_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8,
            ],
        };
        let pid = i32::try_from(client.pid).unwrap_or(i32::MAX);
        let owners: Vec<String> = holds.iter().map(|hold| hold.owner.to_string()).collect();
        let since: Vec<i64> = holds.iter().map(|hold| unix_micros(hold.since)).collect();
        let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let what = "publishing the client's record";
        let timeout = self.statement_timeout();
        self.pool()
            .run(what, Retry::OnConnectionFailure, |con, _| {
                con.query(
                    timeout,
                    sql,
                    &[
                        &client.id,
                        &client.name,
                        &client.host,
                        &pid,
                        &owners,
                        &since,
                        &ttl_us,
                    ],
                )
            })
            .map(drop)
            .map_err(|failure| self.record_failure(failure, what))
    }

    /// Fills in each holder's client (name, host, pid) and how long it has held, from the
    /// rows of the clients that hold `locks` (one round trip).
    pub(crate) fn attach_clients(&self, locks: &mut [LockInfo]) -> Result<(), LockError> {
        let ids = holder_client_ids(locks);
        if ids.is_empty() {
            return Ok(());
        }
        let s = quoted(self.schema());
        let text = format!(
            "SELECT id, name, host, pid, holds, since_us FROM {s}.clients \
             WHERE id = ANY($1) AND expires_at > clock_timestamp()"
        );
        let sql = Sql {
            index: READ_INDEX,
            text: &text,
            types: &[Type::TEXT_ARRAY],
        };
        let what = "reading the holders' client records";
        let timeout = self.statement_timeout();
        let rows = self
            .pool()
            .run(what, Retry::OnConnectionFailure, |con, _| {
                con.query(timeout, sql, &[&ids])
            })
            .map_err(|failure| self.record_failure(failure, what))?;
        let records = rows
            .iter()
            .map(stored_record)
            .collect::<Result<Vec<StoredRecord>, _>>()
            .map_err(|error| LockError::protocol(format!("unexpected client record: {error}")))?;
        attach_records(locks, &records, SystemTime::now());
        Ok(())
    }

    fn record_failure(&self, failure: StepFailure, what: &str) -> LockError {
        match failure {
            StepFailure::Checkout(error) => error,
            StepFailure::Call(error) => to_lock_error(error, what, self.server()),
        }
    }
}

/// One client's row as read back.
fn stored_record(row: &Row) -> Result<StoredRecord, tokio_postgres::Error> {
    let holds: Vec<String> = row.try_get(4)?;
    let since: Vec<i64> = row.try_get(5)?;
    let pid: i32 = row.try_get(3)?;
    let client = ClientRecord::new(
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        u32::try_from(pid).unwrap_or(0),
    );
    let since = holds
        .into_iter()
        .zip(since)
        .map(|(hold, us)| {
            let us = u64::try_from(us).unwrap_or(0);
            (hold, UNIX_EPOCH + Duration::from_micros(us))
        })
        .collect();
    Ok(StoredRecord::new(client, since))
}

fn unix_micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
    })
}
