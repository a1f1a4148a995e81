//! The SQL of each step, prepared once per connection, with its parameters' types: one call of
//! a schema function, or, for the most frequent steps (an uncontended reentrant lock taken and
//! released), one plain statement that the function backs up when it finds nothing to do.

use tokio_postgres::types::Type;

use crate::connection::Sql;
use crate::schema::quoted;

/// The SQL of every step, for one schema.
pub(super) struct Statements {
    texts: Vec<String>,
}

/// The steps, by their index in [`Statements`], with their parameters' types.
#[derive(Clone, Copy)]
pub(super) enum Step {
    /// A free reentrant lock taken with one `INSERT`; no row answered: `Acquire` decides.
    TakeFree,
    /// A reentrant or fenced hold released with one `DELETE`; no row answered: `Release`
    /// decides (not held, lost, or released by an earlier attempt).
    DeleteHold,
    Acquire,
    AcquireMany,
    Release,
    ReleaseMany,
    HandOver,
    Renew,
    Status,
    ForceUnlock,
    CancelWait,
    Watch,
    AcquireLeader,
    Counter,
    Leader,
}

impl Step {
    const ALL: [Step; 15] = [
        Step::TakeFree,
        Step::DeleteHold,
        Step::Acquire,
        Step::AcquireMany,
        Step::Release,
        Step::ReleaseMany,
        Step::HandOver,
        Step::Renew,
        Step::Status,
        Step::ForceUnlock,
        Step::CancelWait,
        Step::Watch,
        Step::AcquireLeader,
        Step::Counter,
        Step::Leader,
    ];

    /// The SQL, with `s` for the quoted schema.
    pub(super) fn sql(self, s: &str) -> String {
        match self {
            // set_config(.., true) in the statement: the commit's durability is the step's,
            // whatever the session's (a transaction pooler may hand out any session).
            // A hold ended before under this id (force-unlocked, or its lease ran out) is not
            // made again: the function says gone. The insert may have waited for a row being
            // deleted (a force-unlock of this very hold, whose end the first look could not
            // see): asked again once the row is in, it rolls back (DL004) if the hold ended.
            // The plain lock's waiters go in turn: taken only if no other waiter ($5 is this
            // one) is marked before this one's mark (or at all, if it has none); its mark goes,
            // and the row says contended while others are marked.
            Step::TakeFree => format!(
                "WITH mine AS (SELECT m.seq FROM {s}.lock_waiters m \
                               WHERE m.name = $1 AND m.owner = $5 \
                                 AND m.until > clock_timestamp()), \
                 taken AS (\
                 INSERT INTO {s}.locks (name, family, owner, holds, expires_at, contended) \
                 SELECT $1, 'e', $2, 1, {s}._after(clock_timestamp(), $3), \
                        EXISTS (SELECT 1 FROM {s}.lock_waiters w \
                                WHERE w.name = $1 AND w.owner <> $5 \
                                  AND w.until > clock_timestamp()) \
                 FROM (SELECT set_config('synchronous_commit', $4, true)) AS step \
                 WHERE NOT EXISTS (SELECT 1 FROM {s}.lost_holds l \
                                   WHERE l.name = $1 AND l.owner = $2) \
                   AND NOT EXISTS (SELECT 1 FROM {s}.lock_waiters w \
                                   WHERE w.name = $1 AND w.owner <> $5 \
                                     AND w.until > clock_timestamp() \
                                     AND w.seq < coalesce((SELECT seq FROM mine), \
                                                          9223372036854775807)) \
                 ON CONFLICT (name) DO NOTHING RETURNING true), \
                 unmarked AS (DELETE FROM {s}.lock_waiters \
                              WHERE name = $1 AND owner = $5 AND EXISTS (SELECT 1 FROM taken)) \
                 SELECT {s}._unless_ended($1, $2, 0) FROM taken"
            ),
            // Only a live hold answers: an expired one (lost) is left for Release to note. CASE,
            // not AND: the notification is sent only when a waiter is known (to the one marked
            // first, if one is: `_announce_free_e`). A first attempt
            // (its request id $4; NULL when sent again) that finds no live hold latches "not
            // held", so that the release sent again answers the same.
            Step::DeleteHold => format!(
                "WITH step AS (SELECT set_config('synchronous_commit', $3, true)), \
                 gone AS (DELETE FROM {s}.locks WHERE name = $1 AND owner = $2 AND family = 'e' \
                          AND expires_at > clock_timestamp() RETURNING contended), \
                 noted AS (INSERT INTO {s}.latches (request, results, expires_at) \
                           SELECT $4, ARRAY[0::smallint], \
                                  clock_timestamp() + interval '10 minutes' \
                           WHERE $4 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM gone) \
                           ON CONFLICT (request) DO NOTHING) \
                 SELECT CASE WHEN gone.contended \
                               OR EXISTS (SELECT 1 FROM {s}.lock_waiters w \
                                          WHERE w.name = $1 \
                                            AND w.until > clock_timestamp()) \
                             THEN {s}._announce_free_e($1, gone.contended, \
                                                       clock_timestamp()) IS NULL END \
                 FROM gone, step"
            ),
            Step::Acquire => format!(
                "SELECT acquired, remaining_us, fencing_token, gone FROM {s}.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            ),
            Step::AcquireMany => format!(
                "SELECT acquired, remaining_us, fencing_token, gone FROM {s}.acquire_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            ),
            Step::Release => format!("SELECT {s}.release($1, $2, $3, $4, $5, $6, $7)"),
            Step::ReleaseMany => format!("SELECT {s}.release_many($1, $2, $3, $4, $5, $6, $7)"),
            Step::HandOver => format!("SELECT {s}.hand_over($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
            Step::Renew => format!("SELECT {s}.renew($1, $2, $3, $4, $5)"),
            Step::Status => {
                format!("SELECT locked, mine, remaining_us FROM {s}.status($1, $2, $3)")
            }
            Step::ForceUnlock => format!("SELECT {s}.force_unlock($1, $2, $3)"),
            Step::CancelWait => format!("SELECT {s}.cancel_wait($1, $2, $3, $4, $5)"),
            Step::Watch => format!("SELECT {s}.watch($1)"),
            Step::AcquireLeader => format!(
                "SELECT acquired, remaining_us, fencing_token, gone FROM {s}.acquire_leader($1, $2, $3, $4, $5)"
            ),
            Step::Counter => format!("SELECT {s}.counter($1, $2, $3, $4, $5, $6, $7)"),
            Step::Leader => {
                format!("SELECT candidate, token, remaining_us FROM {s}.leader($1)")
            }
        }
    }

    pub(super) fn types(self) -> &'static [Type] {
        match self {
            Step::Acquire => &[
                Type::CHAR,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
                Type::BOOL,
                Type::INT8,
                Type::INT8,
                Type::INT8,
                Type::BOOL,
                Type::TEXT,
                Type::TEXT,
            ],
            Step::AcquireMany => &[
                Type::CHAR_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::INT8_ARRAY,
                Type::BOOL_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::BOOL_ARRAY,
                Type::TEXT,
            ],
            Step::Release => &[
                Type::CHAR,
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
                Type::BOOL,
                Type::INT8,
                Type::TEXT,
            ],
            Step::ReleaseMany => &[
                Type::CHAR_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::INT8,
                Type::BOOL,
                Type::INT8,
                Type::TEXT,
            ],
            Step::HandOver => &[
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::BOOL,
                Type::INT8,
                Type::TEXT,
            ],
            Step::Renew => &[
                Type::CHAR_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::INT8,
                Type::TEXT,
            ],
            Step::TakeFree => &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT, Type::TEXT],
            Step::DeleteHold => &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8],
            Step::Status => &[Type::CHAR, Type::TEXT, Type::TEXT],
            Step::ForceUnlock => &[Type::CHAR, Type::TEXT, Type::TEXT],
            Step::CancelWait => &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT, Type::CHAR],
            Step::Watch => &[Type::TEXT],
            Step::AcquireLeader => &[Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
            Step::Counter => &[
                Type::CHAR,
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::BOOL,
                Type::INT8,
                Type::TEXT,
            ],
            Step::Leader => &[Type::TEXT],
        }
    }
}

impl Statements {
    pub(super) fn new(schema: &str) -> Statements {
        let s = quoted(schema);
        Statements {
            texts: Step::ALL.iter().map(|step| step.sql(&s)).collect(),
        }
    }

    pub(super) fn get(&self, step: Step) -> Sql<'_> {
        let index = step as usize;
        Sql {
            index,
            text: &self.texts[index],
            types: step.types(),
        }
    }
}
