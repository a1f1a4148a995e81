//! Rows of the locks table held by a transaction of the harness's own: a slow session's long
//! step on the same locks, so that steps sent meanwhile wait for the rows, each having done
//! what it does before it takes them.

use std::time::{Duration, Instant};

use dlocks::postgres::DEFAULT_SCHEMA;

use super::admin_at;

/// The rows of the locks table whose names are like a pattern, held until let go (or dropped:
/// the transaction ends with its connection).
pub struct RowsHeld {
    admin: postgres::Client,
}

impl RowsHeld {
    /// Holds `name`'s row, made first (as a count-down latch that is open) if there is none.
    pub fn hold_made(url: &str, name: &str) -> RowsHeld {
        let mut admin = admin_at(url);
        admin
            .execute(
                &format!(
                    "INSERT INTO \"{DEFAULT_SCHEMA}\".locks (name, family) VALUES ($1, 'l') \
                     ON CONFLICT (name) DO NOTHING"
                ),
                &[&name],
            )
            .expect("the row");
        Self::hold(admin, "name = $1", name)
    }

    /// Holds the rows whose names begin with `prefix` (those there now).
    pub fn hold_prefixed(url: &str, prefix: &str) -> RowsHeld {
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        Self::hold(admin_at(url), "name LIKE $1", &pattern)
    }

    fn hold(mut admin: postgres::Client, condition: &str, value: &str) -> RowsHeld {
        admin.batch_execute("BEGIN").expect("begin");
        admin
            .execute(
                &format!(
                    "SELECT 1 FROM \"{DEFAULT_SCHEMA}\".locks WHERE {condition} \
                     ORDER BY name FOR UPDATE"
                ),
                &[&value],
            )
            .expect("the rows held");
        RowsHeld { admin }
    }

    /// Waits until `count` other sessions wait for a lock, or until their number has not
    /// grown for `settled` (some of them never meet a held row), bounded by `limit`.
    pub fn await_waiters(&mut self, count: usize, settled: Duration, limit: Duration) {
        let start = Instant::now();
        let (mut seen, mut since) = (0, start);
        while start.elapsed() < limit {
            let waiting: i64 = self
                .admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                    &[],
                )
                .expect("pg_stat_activity")
                .get(0);
            let waiting = usize::try_from(waiting).unwrap_or(0);
            if waiting >= count {
                return;
            }
            if waiting != seen {
                (seen, since) = (waiting, Instant::now());
            } else if since.elapsed() >= settled {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Ends the transaction: the rows are free.
    pub fn let_go(mut self) {
        self.admin.batch_execute("COMMIT").expect("commit");
    }
}
