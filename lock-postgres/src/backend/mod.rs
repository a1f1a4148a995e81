//! [`PostgresBackend`]: the [`DistributedLock`] steps as calls of the schema's functions. This
//! file holds the type, how it connects and how one step is run; the SQL, the values and rows
//! of a call, and the steps themselves each have a file of their own.
//!
//! [`DistributedLock`]: dlock_core::backend::DistributedLock

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use dlock_core::backend::{Acquire, AcquireRequest, LockRef, LossReason, OwnerId};
use dlock_core::{LockError, LockKind};

use crate::config::{PostgresBackendBuilder, Settings};
use crate::connection::{CallError, Connection, Sql};
use crate::durability::Durability;
use crate::error::{hold_ended, step_error, to_lock_error};
use crate::keys::check_name;
use crate::listener::Listener;
use crate::pool::{Manager, Pool, Retry, StepFailure};
use crate::schema;
use crate::tls::Tls;

mod batches;
mod client_records;
mod codec;
mod renewal;
mod statements;
mod steps;

use codec::{acquire_row, kind_code, one_row, request_id};
use statements::{Statements, Step};

/// A [`DistributedLock`](dlock_core::backend::DistributedLock) on one PostgreSQL database (or
/// the primary among several hosts).
///
/// Every lock kind (reentrant, fair, read-write, fenced) is kept as leases in the schema's
/// tables, measured on the server's clock, and every step is one call of a server-side function
/// (one round trip, one transaction). Cheap to clone: clones share the pool and the listening
/// connection, whose thread stops when the last clone is dropped.
///
/// A step blocks the calling thread while its connection's own small runtime drives the call.
/// Called from inside an async runtime (a task using the blocking API, a guard dropped there),
/// where a second runtime cannot block, the call runs on a thread of its own instead, so the
/// blocking API works there too (it still holds up the task's thread for the step); async code
/// uses the `async` surface, whose steps never run on the caller's runtime.
///
/// # Examples
///
/// ```no_run
/// use dlocks::LockClient;
/// use dlocks::postgres::PostgresBackend;
///
/// let client = LockClient::new(PostgresBackend::connect("postgres://app@127.0.0.1:5432/app")?);
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// # Ok::<(), dlocks::LockError>(())
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
    durability: Durability,
    schema: String,
    server: String,
    id: String,
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
        // Part of connecting: a server slow to answer a new session's first queries (its caches
        // cold, the machine busy) is given the longer of the two bounds.
        let checks_within = settings.connect_timeout.max(settings.statement_timeout);
        schema::check_encoding(&mut con, checks_within, &server)?;
        let durability = schema::ensure(
            &mut con,
            &settings.schema,
            settings.durability,
            settings.durability_from_schema,
            settings.create_schema,
            checks_within,
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
                sync: durability.as_str(),
                durability,
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

    /// The durability the lock steps run with: the one set on the builder, or the schema's
    /// sort with [`durability_from_schema`](PostgresBackendBuilder::durability_from_schema).
    pub fn durability(&self) -> Durability {
        self.inner.durability
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
        self.run_step(step, what, retry, params)
            .map_err(|failure| self.failure(failure, lock, what))
    }

    /// [`step`](Self::step), its failure as it came.
    fn run_step(
        &self,
        step: Step,
        what: &str,
        retry: Retry,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StepFailure> {
        let sql = self.inner.statements.get(step);
        let timeout = self.inner.statement_timeout;
        self.inner
            .pool
            .run(what, retry, |con, _| con.query(timeout, sql, params))
    }

    /// The answer to `request` from its step's `outcome`: the acquire's row read, or gone
    /// where the step rolled back because the hold it makes ended while it ran (see
    /// `_unless_ended` in the schema).
    fn acquire_answer(
        &self,
        request: &AcquireRequest<'_>,
        what: &str,
        outcome: Result<Vec<Row>, StepFailure>,
    ) -> Result<Acquire, LockError> {
        let lock = request.lock;
        match outcome {
            Ok(rows) => acquire_row(&one_row(rows, "an acquire")?, request)
                .map_err(|error| error.on_lock(lock.name)),
            Err(StepFailure::Call(error)) if hold_ended(&error) => Ok(Acquire::Gone {
                reason: LossReason::Gone,
            }),
            Err(failure) => Err(self.failure(failure, lock, what)),
        }
    }

    /// Runs the plain statement `first(attempt)` names and, when it answers no row, the step
    /// `then(attempt)` names on the same connection: `None` when `first` answered, else
    /// `then`'s rows. Sent again whole when the connection failed under it (`attempt` counts
    /// the sendings). A failure comes as it came (see [`failure`](Self::failure)).
    fn first_then<'p, 'q, F, P>(
        &self,
        what: &str,
        first: impl Fn(u32) -> (Step, F),
        then: impl Fn(u32) -> (Step, P),
    ) -> Result<Option<Vec<Row>>, StepFailure>
    where
        F: AsRef<[&'q (dyn ToSql + Sync)]>,
        P: AsRef<[&'p (dyn ToSql + Sync)]>,
    {
        let timeout = self.inner.statement_timeout;
        self.inner
            .pool
            .run(what, Retry::OnConnectionFailure, |con, attempt| {
                let (step, params) = first(attempt);
                if !con
                    .query(timeout, self.inner.statements.get(step), params.as_ref())?
                    .is_empty()
                {
                    return Ok(None);
                }
                let (step, params) = then(attempt);
                con.query(timeout, self.inner.statements.get(step), params.as_ref())
                    .map(Some)
            })
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
