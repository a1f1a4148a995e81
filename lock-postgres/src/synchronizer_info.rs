//! Reading what the database holds for a name as a semaphore, a count-down latch or a leader
//! election, without taking anything: for operators and the `dlock` command.

use std::time::Duration;

use dlock_core::backend::{LeaderInfo, PermitInfo, SynchronizerInfo};
use dlock_core::LockError;
use tokio_postgres::Row;

use crate::backend::PostgresBackend;
use crate::schema::quoted;

/// The synchronizer inspection: one row per name, `$1` the names (or `$2` a regular expression
/// they match, with `$3` the most rows, in use only).
fn query(schema: &str, by_pattern: bool) -> String {
    let s = quoted(schema);
    let (names, filter) = if by_pattern {
        (
            format!(
                "SELECT l.name FROM {s}.locks l WHERE l.family IN ('s', 'l', 'n') AND l.name ~ $2"
            ),
            "WHERE count IS NOT NULL OR leader IS NOT NULL OR permit_owners <> '{}' \
             ORDER BY name LIMIT $3",
        )
    } else {
        ("SELECT unnest($1::text[]) AS name".to_owned(), "")
    };
    format!(
        "WITH c AS (SELECT clock_timestamp() AS now), \
              n AS ({names}), \
              v AS ( \
                SELECT n.name, l.family, \
                  CASE l.family \
                       WHEN 's' THEN l.counter + (SELECT count(*) FROM {s}.permits p \
                                                   WHERE p.name = n.name AND p.expires_at <= c.now) \
                       WHEN 'l' THEN l.counter END AS count, \
                  CASE WHEN l.family = 'n' AND l.owner IS NOT NULL AND l.expires_at > c.now \
                       THEN l.owner END AS leader, \
                  l.value AS candidate, \
                  {s}._left(l.expires_at, c.now) AS leader_left_us, \
                  (SELECT f.token FROM {s}.fences f WHERE f.name = n.name) AS token, \
                  coalesce((SELECT array_agg(p.owner ORDER BY p.owner) FROM {s}.permits p \
                            WHERE p.name = n.name AND p.expires_at > c.now), '{{}}') AS permit_owners, \
                  coalesce((SELECT array_agg({s}._left(p.expires_at, c.now) ORDER BY p.owner) \
                            FROM {s}.permits p \
                            WHERE p.name = n.name AND p.expires_at > c.now), '{{}}') AS permit_left_us \
                FROM n CROSS JOIN c \
                LEFT JOIN {s}.locks l ON l.name = n.name AND l.family IN ('s', 'l', 'n')) \
         SELECT name, family, count, leader, candidate, leader_left_us, token, permit_owners, \
                permit_left_us FROM v {filter}"
    )
}

fn info(row: &Row) -> Result<SynchronizerInfo, tokio_postgres::Error> {
    let name: String = row.try_get(0)?;
    let family: Option<i8> = row.try_get(1)?;
    let count: Option<i64> = row.try_get(2)?;
    let leader: Option<String> = row.try_get(3)?;
    let candidate: Option<String> = row.try_get(4)?;
    let leader_left: Option<i64> = row.try_get(5)?;
    let token: Option<i64> = row.try_get(6)?;
    let permit_owners: Vec<String> = row.try_get(7)?;
    let permit_left: Vec<i64> = row.try_get(8)?;
    let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
    let mut info = SynchronizerInfo::new(name);
    info.count = count;
    info.counts = count.and(match family.map(|code| code as u8) {
        Some(b's') => Some("semaphore".to_owned()),
        Some(b'l') => Some("latch".to_owned()),
        _ => None,
    });
    info.permits_held = permit_owners
        .into_iter()
        .zip(permit_left)
        .map(|(owner, left)| PermitInfo::new(owner, Some(micros(left))))
        .collect();
    info.leader = leader.map(|owner| {
        LeaderInfo::new(
            candidate.unwrap_or_default(),
            owner,
            token
                .and_then(|token| u64::try_from(token).ok())
                .unwrap_or(0),
            leader_left.map(micros),
        )
    });
    Ok(info)
}

impl PostgresBackend {
    /// What the database holds for `name` as a semaphore (permits available and held, each
    /// with its lease), a count-down latch (its count) or a leader election (the leader, its
    /// token and lease): one round trip, nothing taken.
    pub fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        let text = query(self.schema(), false);
        // Prepared under an index of its own (no step's, no lock inspection's).
        let what = "a synchronizer inspection";
        self.inspect_one(name, what, usize::MAX - 2, &text, info)
    }

    /// The semaphores, latches and elections in use now (permits set or held, a count, a
    /// leader) whose names match `pattern` (glob syntax), sorted by name, at most `limit`.
    pub fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        let text = query(self.schema(), true);
        let what = "a synchronizer listing";
        self.inspect_matching(pattern, limit, what, usize::MAX - 3, &text, info)
    }
}
