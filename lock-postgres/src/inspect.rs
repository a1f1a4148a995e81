//! Reading what the database holds for lock names without taking them: who holds a lock, how
//! long its lease still runs, who queues for it. For operators and the `dlock` command; a
//! program that needs the lock asks for it instead (the answer is stale as soon as it is read).

use std::time::Duration;

use dlock_core::backend::{
    validate_listing, validate_name, HeldAs, Inspection, LockHolder, LockInfo, SynchronizerInfo,
};
use dlock_core::LockError;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use crate::backend::PostgresBackend;
use crate::connection::Sql;
use crate::error::to_lock_error;
use crate::keys::check_name;
use crate::pool::{Retry, StepFailure};
use crate::schema::quoted;

/// The most locks [`PostgresBackend::list_locks`] returns, and the default a caller should pass
/// when it has no reason to pick another.
pub const DEFAULT_LIST_LIMIT: usize = 1000;

/// The inspection query: one row per name, `$1` the names (or `$2` a regular expression they
/// match, with `$3` the most rows).
fn query(schema: &str, by_pattern: bool) -> String {
    let s = quoted(schema);
    let (names, filter) = if by_pattern {
        (
            format!(
                "SELECT l.name FROM {s}.locks l WHERE l.family IN ('e', 'f', 'w') AND l.name ~ $2"
            ),
            "WHERE holder IS NOT NULL OR reader_owners <> '{}' ORDER BY name LIMIT $3",
        )
    } else {
        ("SELECT unnest($1::text[]) AS name".to_owned(), "")
    };
    format!(
        "WITH c AS (SELECT clock_timestamp() AS now), \
              n AS ({names}), \
              v AS ( \
                SELECT n.name, l.family, \
                  CASE WHEN l.owner IS NOT NULL AND l.expires_at > c.now THEN l.owner END AS holder, \
                  l.holds, \
                  CASE WHEN l.owner IS NOT NULL AND l.expires_at > c.now \
                       THEN {s}._left(l.expires_at, c.now) END AS holder_left_us, \
                  coalesce((SELECT array_agg(r.owner ORDER BY r.owner) FROM {s}.readers r \
                            WHERE r.name = n.name AND r.expires_at > c.now), '{{}}') AS reader_owners, \
                  coalesce((SELECT array_agg(r.holds::bigint ORDER BY r.owner) FROM {s}.readers r \
                            WHERE r.name = n.name AND r.expires_at > c.now), '{{}}') AS reader_holds, \
                  (SELECT {s}._left(max(r.expires_at), c.now) FROM {s}.readers r \
                    WHERE r.name = n.name AND r.expires_at > c.now) AS reader_left_us, \
                  (SELECT count(*) FROM {s}.waiters w \
                    WHERE w.name = n.name AND w.timeout_at > c.now) AS queued, \
                  (SELECT f.token FROM {s}.fences f WHERE f.name = n.name) AS token \
                FROM n CROSS JOIN c \
                LEFT JOIN {s}.locks l ON l.name = n.name AND l.family IN ('e', 'f', 'w')) \
         SELECT name, family, holder, holds, holder_left_us, reader_owners, reader_holds, \
                reader_left_us, queued, token FROM v {filter}"
    )
}

fn info(row: &Row) -> Result<LockInfo, tokio_postgres::Error> {
    let name: String = row.try_get(0)?;
    let family: Option<i8> = row.try_get(1)?;
    let holder: Option<String> = row.try_get(2)?;
    let holds: Option<i32> = row.try_get(3)?;
    let holder_left: Option<i64> = row.try_get(4)?;
    let reader_owners: Vec<String> = row.try_get(5)?;
    let reader_holds: Vec<i64> = row.try_get(6)?;
    let reader_left: Option<i64> = row.try_get(7)?;
    let queued: i64 = row.try_get(8)?;
    let token: Option<i64> = row.try_get(9)?;
    let family = family.map(|code| code as u8);
    let mut holders = Vec::new();
    if let Some(owner) = &holder {
        holders.push(LockHolder::new(
            owner.clone(),
            u64::try_from(holds.unwrap_or(1)).unwrap_or(1),
            family == Some(b'w'),
        ));
    }
    for (owner, holds) in reader_owners.into_iter().zip(reader_holds) {
        holders.push(LockHolder::new(
            owner,
            u64::try_from(holds).unwrap_or(1),
            false,
        ));
    }
    let held_as = match (family, holder.is_some(), reader_left.is_some()) {
        (Some(b'w'), true, _) => HeldAs::Write,
        (Some(b'w'), false, true) => HeldAs::Read,
        (Some(b'f'), true, _) => HeldAs::Fair,
        // A name with a token counter is a fenced lock's.
        (Some(_), true, _) if token.is_some() => HeldAs::Fenced,
        (Some(_), true, _) => HeldAs::Exclusive,
        _ => HeldAs::Free,
    };
    let remaining = holder_left.into_iter().chain(reader_left).max();
    let mut info = LockInfo::free(name);
    info.held_as = held_as;
    info.holders = holders;
    info.remaining_lease =
        remaining.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
    info.queued_waiters = u64::try_from(queued).unwrap_or(0);
    info.last_fencing_token = token.and_then(|token| u64::try_from(token).ok());
    Ok(info)
}

/// A glob (`*`, `?`, `[ab]`) as an anchored POSIX regular expression.
fn glob_to_regex(pattern: &str) -> String {
    let mut regex = String::from("^");
    let mut in_class = false;
    for c in pattern.chars() {
        match c {
            '[' if !in_class => {
                in_class = true;
                regex.push('[');
            }
            ']' if in_class => {
                in_class = false;
                regex.push(']');
            }
            _ if in_class => {
                if c == '\\' {
                    regex.push('\\');
                }
                regex.push(c);
            }
            '*' => regex.push_str(".*"),
            '?' => regex.push('.'),
            '.' | '+' | '(' | ')' | '{' | '}' | '|' | '^' | '$' | '\\' | ']' => {
                regex.push('\\');
                regex.push(c);
            }
            _ => regex.push(c),
        }
    }
    if in_class {
        regex.push(']');
    }
    regex.push('$');
    regex
}

impl PostgresBackend {
    /// What the database holds for lock `name` now: holders, remaining lease, queued fair
    /// waiters, the last fencing token (one round trip, nothing taken).
    ///
    /// The answer is for people and tools (`dlock status`); it is stale once read, so a
    /// program that needs the lock should ask for it instead.
    pub fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let text = query(self.schema(), false);
        // Not one of the steps: never prepared under a step's index.
        let what = "a lock inspection";
        let mut info = self.inspect_one(name, what, usize::MAX, &text, info)?;
        self.attach_clients(std::slice::from_mut(&mut info))?;
        Ok(info)
    }

    /// The locks held now whose names match `pattern` (glob syntax: `*`, `?`, `[ab]`), sorted
    /// by name, at most `limit` of them (one round trip; the schema's table is scanned).
    pub fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let text = query(self.schema(), true);
        let what = "a lock listing";
        let mut locks = self.inspect_matching(pattern, limit, what, usize::MAX - 1, &text, info)?;
        self.attach_clients(&mut locks)?;
        Ok(locks)
    }

    /// The row of `name` that the inspection query `text` answers (its parameters: the names,
    /// a regular expression, a limit), prepared on each connection under `index`, read by
    /// `read`.
    pub(crate) fn inspect_one<T>(
        &self,
        name: &str,
        what: &str,
        index: usize,
        text: &str,
        read: fn(&Row) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, LockError> {
        validate_name(name)?;
        check_name(name)?;
        let names = vec![name];
        let rows = self.read_only(what, index, text, &[&names, &"", &0i64])?;
        let row = rows
            .first()
            .ok_or_else(|| LockError::protocol(format!("no answer to {what}")))?;
        read(row).map_err(|error| unexpected(error).on_lock(name))
    }

    /// The rows of the names matching `pattern` that the inspection query `text` answers, at
    /// most `limit`, as [`inspect_one`](Self::inspect_one) reads one.
    pub(crate) fn inspect_matching<T>(
        &self,
        pattern: &str,
        limit: usize,
        what: &str,
        index: usize,
        text: &str,
        read: fn(&Row) -> Result<T, tokio_postgres::Error>,
    ) -> Result<Vec<T>, LockError> {
        validate_listing(pattern, limit)?;
        let regex = glob_to_regex(pattern);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let none: Vec<&str> = Vec::new();
        let rows = self.read_only(what, index, text, &[&none, &regex, &limit])?;
        rows.iter()
            .map(|row| read(row).map_err(unexpected))
            .collect()
    }

    /// Runs the read-only query `text`, prepared on each connection under `index`.
    fn read_only(
        &self,
        what: &str,
        index: usize,
        text: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let sql = Sql {
            index,
            text,
            types: &[Type::TEXT_ARRAY, Type::TEXT, Type::INT8],
        };
        let timeout = self.statement_timeout();
        self.pool()
            .run(what, Retry::OnConnectionFailure, |con, _| {
                con.query(timeout, sql, params)
            })
            .map_err(|failure| match failure {
                StepFailure::Checkout(error) => error,
                StepFailure::Call(error) => to_lock_error(error, what, self.server()),
            })
    }
}

fn unexpected(error: tokio_postgres::Error) -> LockError {
    LockError::protocol(format!("unexpected inspection row: {error}"))
}

/// The inspection hook of the contract ([`DistributedLock::inspection`]), by the calls above
/// and the synchronizers' (`synchronizer_info`).
///
/// [`DistributedLock::inspection`]: dlock_core::backend::DistributedLock::inspection
impl Inspection for PostgresBackend {
    fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        PostgresBackend::inspect(self, name)
    }

    fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        PostgresBackend::inspect_synchronizer(self, name)
    }

    fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        PostgresBackend::list_locks(self, pattern, limit)
    }

    fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        PostgresBackend::list_synchronizers(self, pattern, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::glob_to_regex;

    #[test]
    fn globs_become_anchored_regular_expressions() {
        assert_eq!(glob_to_regex("*"), "^.*$");
        assert_eq!(glob_to_regex("deploy?"), "^deploy.$");
        assert_eq!(glob_to_regex("a.b[xy]*"), "^a\\.b[xy].*$");
        assert_eq!(glob_to_regex("(x)"), "^\\(x\\)$");
    }
}
