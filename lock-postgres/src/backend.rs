//! [`PostgresBackend`]: the [`DistributedLock`] steps as calls of the schema's functions.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use dlock_core::backend::{
    Acquire, AcquireRequest, DistributedLock, Grant, Handover, HoldRef, LockRef, LockStatus,
    LossReason, OwnerId, Release, ReleaseSubscription, Renewal,
};
use dlock_core::{LockError, LockKind};

use crate::config::{PostgresBackendBuilder, Settings};
use crate::connection::{CallError, Connection, Sql};
use crate::error::{copy_for_lock, step_error, to_lock_error, wrong_kind_index};
use crate::keys::{check_name, lock_key, waiter_key};
use crate::listener::Listener;
use crate::pool::{Manager, Pool, Retry, StepFailure};
use crate::schema::{self, quoted};
use crate::tls::Tls;

/// A [`DistributedLock`] on one PostgreSQL database (or the primary among several hosts).
///
/// Every lock kind (reentrant, fair, read-write, fenced) is kept as leases in the schema's
/// tables, measured on the server's clock, and every step is one call of a server-side function
/// (one round trip, one transaction). Cheap to clone: clones share the pool and the listening
/// connection, whose thread stops when the last clone is dropped.
///
/// The backend blocks the calling thread on its own small runtime per connection: call it from
/// plain threads (or `spawn_blocking`), not from inside an async task.
///
/// # Examples
///
/// ```no_run
/// use dlock_core::LockClient;
/// use dlock_postgres::PostgresBackend;
///
/// let client = LockClient::new(PostgresBackend::connect("postgres://app@127.0.0.1:5432/app")?);
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// # Ok::<(), dlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    // Declared after the pool: dropped after it, so the thread ends last.
    listener: Listener,
    statements: Statements,
    statement_timeout: Duration,
    sync: &'static str,
    schema: String,
    server: String,
    id: String,
}

/// The SQL of every step, for one schema.
struct Statements {
    texts: Vec<String>,
}

/// The steps, by their index in [`Statements`], with their parameters' types.
#[derive(Clone, Copy)]
enum Step {
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
}

impl Step {
    const ALL: [Step; 10] = [
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
    ];

    /// The SQL, with `S` for the quoted schema.
    fn sql(self, s: &str) -> String {
        match self {
            Step::Acquire => format!(
                "SELECT acquired, remaining_us, fencing_token FROM {s}.acquire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ),
            Step::AcquireMany => format!(
                "SELECT acquired, remaining_us, fencing_token FROM {s}.acquire_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            ),
            Step::Release => format!("SELECT {s}.release($1, $2, $3, $4, $5, $6, $7)"),
            Step::ReleaseMany => format!("SELECT {s}.release_many($1, $2, $3, $4, $5, $6, $7)"),
            Step::HandOver => format!("SELECT {s}.hand_over($1, $2, $3, $4, $5, $6, $7, $8)"),
            Step::Renew => format!("SELECT {s}.renew($1, $2, $3, $4, $5)"),
            Step::Status => {
                format!("SELECT locked, mine, remaining_us FROM {s}.status($1, $2, $3)")
            }
            Step::ForceUnlock => format!("SELECT {s}.force_unlock($1, $2, $3)"),
            Step::CancelWait => format!("SELECT {s}.cancel_wait($1, $2, $3, $4)"),
            Step::Watch => format!("SELECT {s}.watch($1)"),
        }
    }

    fn types(self) -> &'static [Type] {
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
            Step::Status => &[Type::CHAR, Type::TEXT, Type::TEXT],
            Step::ForceUnlock => &[Type::CHAR, Type::TEXT, Type::TEXT],
            Step::CancelWait => &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
            Step::Watch => &[Type::TEXT],
        }
    }
}

impl Statements {
    fn new(schema: &str) -> Statements {
        let s = quoted(schema);
        Statements {
            texts: Step::ALL.iter().map(|step| step.sql(&s)).collect(),
        }
    }

    fn get(&self, step: Step) -> Sql<'_> {
        let index = step as usize;
        Sql {
            index,
            text: &self.texts[index],
            types: step.types(),
        }
    }
}

/// How a kind is named in the schema's functions.
fn kind_code(lock: LockRef<'_>) -> Result<i8, LockError> {
    let code = match lock.kind {
        LockKind::Reentrant => b'e',
        LockKind::Fenced => b't',
        LockKind::Fair => b'f',
        LockKind::Read => b'r',
        LockKind::Write => b'w',
        _ => {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            })
        }
    };
    Ok(code as i8)
}

/// A duration in whole microseconds, rounded up (a lease the store sets is never shorter than
/// the one the client counts on), at least 1.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000))
        .unwrap_or(i64::MAX)
        .max(1)
}

fn from_micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// A random request id for a release's latch.
fn request_id() -> i64 {
    let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
    high as i64
}

thread_local! {
    /// The last acquire this thread had refused (the backend, the lock, the owner): that
    /// acquire marked the lock contended already, so the subscription that follows it needs no
    /// step of its own.
    static LAST_REFUSAL: RefCell<Option<(usize, LockKind, String, OwnerId)>> =
        const { RefCell::new(None) };
}

impl PostgresBackend {
    /// Connects with the default settings, checks the server and the schema (creating it if
    /// it is missing).
    ///
    /// `url` is `postgres://[user[:password]@]host[:port][,host[:port]...]/database[?param=...]`
    /// (libpq's URL form, or its `key=value` form); several hosts with
    /// `target_session_attrs=read-write` connect to whichever is the primary.
    ///
    /// # Errors
    ///
    /// As [`PostgresBackendBuilder::build`].
    pub fn connect(url: &str) -> Result<PostgresBackend, LockError> {
        Self::builder(url).build()
    }

    /// A builder to set the pool size, timeouts, schema and durability before connecting.
    pub fn builder(url: &str) -> PostgresBackendBuilder {
        PostgresBackendBuilder::new(url)
    }

    pub(crate) fn from_settings(settings: Settings) -> Result<PostgresBackend, LockError> {
        let config = crate::url::parse(&settings.url, settings.connect_timeout, "dlock")?;
        let server = crate::url::describe(&config);
        let hosts = u32::try_from(config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
        let open_within = settings.connect_timeout.saturating_mul(hosts);
        let tls = Tls::for_config(&config, &settings.tls)?;
        // Check now, with the precise error a pool checkout would blur, that the server answers,
        // takes the credentials, stores UTF-8, and has the schema.
        let mut con = Connection::open(&config, &tls, open_within, false, 0)
            .map_err(|error| to_lock_error(error, "connecting", &server))?;
        schema::check_encoding(&mut con, settings.statement_timeout, &server)?;
        schema::ensure(
            &mut con,
            &settings.schema,
            settings.create_schema,
            settings.statement_timeout,
            &server,
        )?;
        drop(con);

        let manager = Manager {
            config: config.clone(),
            tls: tls.clone(),
            open_within,
            prepare: settings.prepared_statements,
            epoch: Arc::new(AtomicU64::new(0)),
            last_error: Arc::new(Mutex::new(None)),
            server: server.clone(),
        };
        let pool = Pool::new(
            manager,
            settings.pool_size,
            settings.checkout_timeout,
            settings.statement_timeout,
        );
        let mut listen_config = config;
        if crate::url::parse(&settings.url, settings.connect_timeout, "dlock")?
            .get_application_name()
            == Some("dlock")
        {
            listen_config.application_name("dlock-listener");
        }
        let listener = Listener::new(
            listen_config,
            tls,
            &settings.schema,
            open_within,
            settings.statement_timeout,
            server.clone(),
        );
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                pool,
                listener,
                statements: Statements::new(&settings.schema),
                statement_timeout: settings.statement_timeout,
                sync: settings.durability.as_str(),
                schema: settings.schema,
                server,
                id: uuid::Uuid::new_v4().to_string(),
            }),
        })
    }

    /// `PostgreSQL host:port/database` of the server this backend talks to (every host, for a
    /// URL with several).
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The schema holding the locks.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Whether the listening connection is up now (waiters are woken by releases; while it is
    /// down they wait on their holders' leases).
    pub fn is_listening(&self) -> bool {
        self.inner.listener.is_listening()
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    pub(crate) fn statement_timeout(&self) -> Duration {
        self.inner.statement_timeout
    }

    /// Runs `step` with `params` on a pooled connection; `what` names it in errors about `lock`.
    fn step(
        &self,
        lock: LockRef<'_>,
        step: Step,
        what: &str,
        retry: Retry,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let sql = self.inner.statements.get(step);
        let timeout = self.inner.statement_timeout;
        self.inner
            .pool
            .run(what, retry, |con, _| con.query(timeout, sql, params))
            .map_err(|failure| self.failure(failure, lock, what))
    }

    fn failure(&self, failure: StepFailure, lock: LockRef<'_>, what: &str) -> LockError {
        match failure {
            StepFailure::Checkout(error) => error.on_lock(lock.name),
            StepFailure::Call(error) => step_error(error, lock, what, &self.inner.server),
        }
    }

    /// A latched release-like step (`release`, `hand_over`, `release_many`): sent once, and
    /// once more with its latch checked when the connection failed under it, so that a retried
    /// release replays the first one's answer instead of acting twice.
    fn latched<T>(
        &self,
        step: Step,
        what: &str,
        mut call: impl FnMut(&mut Connection, Sql<'_>, i64, bool, Option<i64>) -> Result<T, CallError>,
    ) -> Result<T, StepFailure> {
        let sql = self.inner.statements.get(step);
        let request = request_id();
        self.inner
            .pool
            .run(what, Retry::OnConnectionFailure, |con, attempt| {
                let forget = con.latch_to_forget.take();
                let result = call(con, sql, request, attempt > 0, forget);
                match &result {
                    // Its answer is in hand: the next release on this connection deletes it.
                    Ok(_) => con.latch_to_forget = Some(request),
                    // Not deleted after all: let the next release try again.
                    Err(_) => con.latch_to_forget = forget,
                }
                result
            })
    }

    fn check(&self, lock: LockRef<'_>) -> Result<i8, LockError> {
        check_name(lock.name)?;
        kind_code(lock)
    }

    /// Whether this thread's last refused acquire was of `lock` by `owner` (and forgets it).
    fn just_refused(&self, lock: LockRef<'_>, owner: &OwnerId) -> bool {
        let me = Arc::as_ptr(&self.inner) as usize;
        LAST_REFUSAL.with(|last| {
            let last = last.borrow_mut().take();
            matches!(last, Some((backend, kind, name, who))
                if backend == me && kind == lock.kind && name == lock.name && &who == owner)
        })
    }

    fn note_refusal(&self, lock: LockRef<'_>, owner: &OwnerId) {
        let me = Arc::as_ptr(&self.inner) as usize;
        LAST_REFUSAL.with(|last| {
            *last.borrow_mut() = Some((me, lock.kind, lock.name.to_owned(), owner.clone()));
        });
    }
}

/// An acquire's row: (acquired, remaining µs, fencing token).
fn acquire_row(row: &Row, kind: LockKind) -> Result<Acquire, LockError> {
    let acquired: Option<bool> = row.try_get(0).map_err(protocol)?;
    let remaining: Option<i64> = row.try_get(1).map_err(protocol)?;
    let token: Option<i64> = row.try_get(2).map_err(protocol)?;
    if acquired == Some(true) {
        let mut grant = Grant::PLAIN;
        if kind == LockKind::Fenced {
            let token = token.ok_or_else(|| {
                LockError::protocol("the server granted a fenced lock without a token")
            })?;
            grant = grant.with_fencing_token(u64::try_from(token).unwrap_or(0));
        }
        Ok(Acquire::Acquired(grant))
    } else {
        Ok(Acquire::Held {
            remaining_lease: remaining.map(from_micros),
        })
    }
}

fn protocol(error: tokio_postgres::Error) -> LockError {
    LockError::Protocol {
        message: format!("unexpected answer from PostgreSQL: {error}"),
        lock: None,
        source: Some(Box::new(error)),
    }
}

fn one_row(rows: Vec<Row>, what: &str) -> Result<Row, LockError> {
    rows.into_iter()
        .next()
        .ok_or_else(|| LockError::protocol(format!("no answer to {what}")))
}

/// A release code: 1 released, 0 not held.
fn release_of(code: i16) -> Release {
    if code == 1 {
        Release::Released
    } else {
        Release::NotHeld
    }
}

/// What a release-many code below zero says the name is in use as.
fn family_of_code(code: i16) -> &'static str {
    match code {
        -1 => "a reentrant or fenced lock",
        -2 => "a fair lock",
        _ => "a read-write lock",
    }
}

impl DistributedLock for PostgresBackend {
    fn supports(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant
                | LockKind::Fair
                | LockKind::Read
                | LockKind::Write
                | LockKind::Fenced
        )
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let lock = request.lock;
        let kind = self.check(lock)?;
        let lease = micros(request.lease);
        let slot = micros(request.queue_slot);
        let grant = request.grant.map(|offer| micros(offer.lease));
        let attempt = request.grant.map(|offer| offer.attempt as i64);
        let owner = request.owner.as_str();
        let waiter = request.waiter.as_str();
        let writer = request.write_hold.map(OwnerId::as_str);
        let rows = self.step(
            lock,
            Step::Acquire,
            "acquiring",
            Retry::OnConnectionFailure,
            &[
                &kind,
                &lock.name,
                &owner,
                &waiter,
                &writer,
                &lease,
                &request.will_wait,
                &slot,
                &grant,
                &attempt,
                &self.inner.sync,
            ],
        )?;
        let acquire = acquire_row(&one_row(rows, "an acquire")?, lock.kind)
            .map_err(|error| error.on_lock(lock.name))?;
        if !acquire.is_acquired() && !lock.kind.queues_on_store() {
            self.note_refusal(lock, request.waiter);
        }
        Ok(acquire)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        let kind = self.check(lock)?;
        let code: i16 = self
            .latched(
                Step::Release,
                "releasing",
                |con, sql, request, retry, forget| {
                    let rows = con.query(
                        self.inner.statement_timeout,
                        sql,
                        &[
                            &kind,
                            &lock.name,
                            &owner.as_str(),
                            &request,
                            &retry,
                            &forget,
                            &self.inner.sync,
                        ],
                    )?;
                    Ok(rows.first().map_or(0, |row| row.get(0)))
                },
            )
            .map_err(|failure| self.failure(failure, lock, "releasing"))?;
        Ok(release_of(code))
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        matches!(kind, LockKind::Reentrant | LockKind::Fair)
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        if lock.kind != LockKind::Reentrant {
            return self.release(lock, owner).map(Handover::from);
        }
        self.check(lock)?;
        let lease = micros(successor.lease);
        let code: i16 = self
            .latched(
                Step::HandOver,
                "handing over",
                |con, sql, request, retry, forget| {
                    let rows = con.query(
                        self.inner.statement_timeout,
                        sql,
                        &[
                            &lock.name,
                            &owner.as_str(),
                            &successor.owner.as_str(),
                            &lease,
                            &request,
                            &retry,
                            &forget,
                            &self.inner.sync,
                        ],
                    )?;
                    Ok(rows.first().map_or(0, |row| row.get(0)))
                },
            )
            .map_err(|failure| self.failure(failure, lock, "handing over"))?;
        Ok(match code {
            2 => Handover::Granted(Grant::PLAIN),
            1 => Handover::Released,
            _ => Handover::NotHeld,
        })
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        let mut kinds = Vec::with_capacity(requests.len());
        for request in requests {
            kinds.push(self.check(request.lock)?);
        }
        if requests.len() < 2 {
            return requests
                .iter()
                .map(|request| self.try_acquire(request))
                .collect();
        }
        let names: Vec<&str> = requests.iter().map(|r| r.lock.name).collect();
        let owners: Vec<&str> = requests.iter().map(|r| r.owner.as_str()).collect();
        let waiters: Vec<&str> = requests.iter().map(|r| r.waiter.as_str()).collect();
        let writers: Vec<Option<&str>> = requests
            .iter()
            .map(|r| r.write_hold.map(OwnerId::as_str))
            .collect();
        let leases: Vec<i64> = requests.iter().map(|r| micros(r.lease)).collect();
        let waits: Vec<bool> = requests.iter().map(|r| r.will_wait).collect();
        let slots: Vec<i64> = requests.iter().map(|r| micros(r.queue_slot)).collect();
        let grants: Vec<Option<i64>> = requests
            .iter()
            .map(|r| r.grant.map(|offer| micros(offer.lease)))
            .collect();
        let attempts: Vec<Option<i64>> = requests
            .iter()
            .map(|r| r.grant.map(|offer| offer.attempt as i64))
            .collect();
        let sql = self.inner.statements.get(Step::AcquireMany);
        let timeout = self.inner.statement_timeout;
        let result =
            self.inner
                .pool
                .run("acquiring a batch", Retry::OnConnectionFailure, |con, _| {
                    con.query(
                        timeout,
                        sql,
                        &[
                            &kinds,
                            &names,
                            &owners,
                            &waiters,
                            &writers,
                            &leases,
                            &waits,
                            &slots,
                            &grants,
                            &attempts,
                            &self.inner.sync,
                        ],
                    )
                });
        let rows = match result {
            Ok(rows) => rows,
            Err(StepFailure::Call(error)) => {
                // The whole batch was rolled back; the error is about the request it names.
                let at = wrong_kind_index(&error)
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| requests.get(i))
                    .map_or(requests[0].lock, |request| request.lock);
                return Err(step_error(
                    error,
                    at,
                    "acquiring a batch",
                    &self.inner.server,
                ));
            }
            Err(StepFailure::Checkout(error)) => return Err(error),
        };
        if rows.len() != requests.len() {
            return Err(LockError::protocol(format!(
                "a batch of {} acquires answered {} results",
                requests.len(),
                rows.len()
            )));
        }
        let mut found = Vec::with_capacity(requests.len());
        for (request, row) in requests.iter().zip(&rows) {
            found.push(
                acquire_row(row, request.lock.kind)
                    .map_err(|error| error.on_lock(request.lock.name))?,
            );
        }
        Ok(found)
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        if holds.len() < 2 {
            return holds
                .iter()
                .map(|hold| self.release(hold.lock, hold.owner))
                .collect();
        }
        let mut kinds = Vec::with_capacity(holds.len());
        for hold in holds {
            match self.check(hold.lock) {
                Ok(kind) => kinds.push(kind),
                Err(error) => {
                    let text = error.to_string();
                    return holds
                        .iter()
                        .map(|other| {
                            Err(copy_for_lock(
                                &LockError::protocol(text.clone()),
                                other.lock.name,
                            ))
                        })
                        .collect();
                }
            }
        }
        let names: Vec<&str> = holds.iter().map(|h| h.lock.name).collect();
        let owners: Vec<&str> = holds.iter().map(|h| h.owner.as_str()).collect();
        let result = self.latched(
            Step::ReleaseMany,
            "releasing a batch",
            |con, sql, request, retry, forget| {
                let rows = con.query(
                    self.inner.statement_timeout,
                    sql,
                    &[
                        &kinds,
                        &names,
                        &owners,
                        &request,
                        &retry,
                        &forget,
                        &self.inner.sync,
                    ],
                )?;
                Ok(rows
                    .first()
                    .and_then(|row| row.try_get::<_, Vec<i16>>(0).ok())
                    .unwrap_or_default())
            },
        );
        match result {
            Ok(codes) if codes.len() == holds.len() => holds
                .iter()
                .zip(codes)
                .map(|(hold, code)| {
                    if code < 0 {
                        Err(LockError::WrongKind {
                            name: hold.lock.name.to_owned(),
                            expected: hold.lock.kind,
                            found: family_of_code(code).to_owned(),
                        })
                    } else {
                        Ok(release_of(code))
                    }
                })
                .collect(),
            Ok(codes) => {
                let error = LockError::protocol(format!(
                    "a batch of {} releases answered {} results",
                    holds.len(),
                    codes.len()
                ));
                holds
                    .iter()
                    .map(|hold| Err(copy_for_lock(&error, hold.lock.name)))
                    .collect()
            }
            Err(failure) => {
                let error = self.failure(failure, holds[0].lock, "releasing a batch");
                holds
                    .iter()
                    .map(|hold| Err(copy_for_lock(&error, hold.lock.name)))
                    .collect()
            }
        }
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        let mut kinds = Vec::with_capacity(holds.len());
        for hold in holds {
            kinds.push(self.check(hold.lock)?);
        }
        let names: Vec<&str> = holds.iter().map(|h| h.lock.name).collect();
        let owners: Vec<&str> = holds.iter().map(|h| h.owner.as_str()).collect();
        let lease = micros(lease);
        let sql = self.inner.statements.get(Step::Renew);
        let timeout = self.inner.statement_timeout;
        // Renewing twice is harmless: a failed connection's renewal is simply sent again.
        let rows = self
            .inner
            .pool
            .run("renewing leases", Retry::OnConnectionFailure, |con, _| {
                con.query(
                    timeout,
                    sql,
                    &[&kinds, &names, &owners, &lease, &self.inner.sync],
                )
            })
            .map_err(|failure| match failure {
                StepFailure::Checkout(error) => error,
                StepFailure::Call(error) => {
                    to_lock_error(error, "renewing leases", &self.inner.server)
                }
            })?;
        let codes: Vec<i16> = one_row(rows, "a renewal")?.try_get(0).map_err(protocol)?;
        if codes.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "a renewal of {} holds answered {} results",
                holds.len(),
                codes.len()
            )));
        }
        Ok(codes
            .into_iter()
            .map(|code| match code {
                1 => Renewal::Renewed,
                2 => Renewal::Lost(LossReason::TakenOver),
                _ => Renewal::Lost(LossReason::Gone),
            })
            .collect())
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        let kind = self.check(lock)?;
        let rows = self.step(
            lock,
            Step::Status,
            "reading a lock's status",
            Retry::OnConnectionFailure,
            &[&kind, &lock.name, &owner.as_str()],
        )?;
        let row = one_row(rows, "a status")?;
        let locked: bool = row.try_get(0).map_err(protocol)?;
        let mine: bool = row.try_get(1).map_err(protocol)?;
        let remaining: Option<i64> = row.try_get(2).map_err(protocol)?;
        Ok(if locked {
            LockStatus::held(mine, remaining.map(from_micros))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        let kind = self.check(lock)?;
        let rows = self.step(
            lock,
            Step::ForceUnlock,
            "force-unlocking",
            Retry::Never,
            &[&kind, &lock.name, &self.inner.sync],
        )?;
        one_row(rows, "a force unlock")?
            .try_get(0)
            .map_err(protocol)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.check(lock)?;
        if lock.kind.queues_on_store() {
            // A fair release wakes the queue's head and the one behind it by their own keys.
            return self
                .inner
                .listener
                .subscribe(waiter_key(lock.name, owner.as_str()));
        }
        let subscription = self.inner.listener.subscribe(lock_key(lock.name))?;
        // A release announces itself only when the lock was marked contended: an acquire that
        // found it held marked it; a subscription without one (not the client's way) marks it.
        if !self.just_refused(lock, owner) {
            self.step(
                lock,
                Step::Watch,
                "marking a lock watched",
                Retry::OnConnectionFailure,
                &[&lock.name],
            )?;
        }
        Ok(subscription)
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        if !lock.kind.queues_on_store() {
            return Ok(());
        }
        self.check(lock)?;
        let slot = micros(queue_slot);
        self.step(
            lock,
            Step::CancelWait,
            "leaving a fair lock's queue",
            Retry::OnConnectionFailure,
            &[&lock.name, &owner.as_str(), &slot, &self.inner.sync],
        )
        .map(drop)
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("server", &self.inner.server)
            .field("schema", &self.inner.schema)
            .field("synchronous_commit", &self.inner.sync)
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::micros;
    use std::time::Duration;

    #[test]
    fn a_lease_is_sent_in_whole_microseconds_rounded_up() {
        assert_eq!(micros(Duration::from_millis(30_000)), 30_000_000);
        assert_eq!(micros(Duration::from_nanos(1_001)), 2);
        assert_eq!(micros(Duration::ZERO), 1);
        assert_eq!(micros(Duration::MAX), i64::MAX);
    }
}
