//! The pool of connections for lock steps (r2d2), and the one way every step uses it: checkout
//! bounded, one retry on a fresh connection when the connection failed under the step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use dlock_core::LockError;

use crate::connection::{CallError, Connection};
use crate::error::to_lock_error;
use crate::tls::Tls;

/// How many threads open the pool's connections in the background (r2d2's own default).
const POOL_WORKERS: usize = 3;

/// Opens connections for the pool.
pub(crate) struct Manager {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: Tls,
    /// The bound on opening one connection (each host of the URL gets the connect timeout).
    pub(crate) open_within: Duration,
    pub(crate) prepare: bool,
    /// Connection failures so far: connections opened before the last one are not trusted.
    pub(crate) epoch: Arc<AtomicU64>,
    /// Why the last connection could not be opened, for the checkout error.
    pub(crate) last_error: Arc<Mutex<Option<String>>>,
    pub(crate) server: String,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = LockError;

    fn connect(&self) -> Result<Connection, LockError> {
        let epoch = self.epoch.load(Ordering::Acquire);
        Connection::open(
            &self.config,
            &self.tls,
            self.open_within,
            self.prepare,
            epoch,
        )
        .map_err(|error| {
            let error = to_lock_error(error, "connecting", &self.server);
            *self.last_error.lock() = Some(error.to_string());
            error
        })
    }

    fn is_valid(&self, _: &mut Connection) -> Result<(), LockError> {
        // A query per checkout would double the cost of every lock step: broken connections
        // are found by the error they raise, and never returned to the pool.
        Ok(())
    }

    fn has_broken(&self, con: &mut Connection) -> bool {
        !con.is_usable()
    }
}

/// Logs the pool's background connection failures at debug level (callers get their own error).
#[derive(Debug)]
struct LogErrors;

impl r2d2::HandleError<LockError> for LogErrors {
    fn handle_error(&self, error: LockError) {
        tracing::debug!(%error, "dlock: opening a PostgreSQL connection failed");
    }
}

/// Whether a step is sent again after the connection failed under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Never (a force unlock: its answer tells whether it was held, which a second run would
    /// not know).
    Never,
    /// Once, on a fresh connection, when the connection failed (not when the server was only
    /// slow: the step may still be running there). The step must be safe to run twice, or know
    /// from the attempt number that it is a retry.
    OnConnectionFailure,
}

/// The pool. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pool {
    pool: r2d2::Pool<Manager>,
    epoch: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
    checkout_timeout: Duration,
    /// What one step may take, from its start to its answer: the wait for a connection, the
    /// call and a second attempt together.
    step_timeout: Duration,
    pub(crate) server: String,
}

impl Pool {
    /// Builds the pool; its connections open in the background (the backend has already
    /// checked with a connection of its own that the server answers).
    pub(crate) fn new(
        manager: Manager,
        size: u32,
        checkout_timeout: Duration,
        step_timeout: Duration,
    ) -> Pool {
        let epoch = manager.epoch.clone();
        let last_error = manager.last_error.clone();
        let server = manager.server.clone();
        // The pool's own workers, which stop as soon as it is dropped (r2d2's default ones
        // would first finish an idle check scheduled up to 30 s ahead).
        let workers = ScheduledThreadPool::builder()
            .num_threads(POOL_WORKERS)
            .thread_name_pattern("dlock-pg-pool-{}")
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build();
        let pool = r2d2::Pool::builder()
            .thread_pool(Arc::new(workers))
            .max_size(size)
            .min_idle(Some(1))
            .test_on_check_out(false)
            .connection_timeout(checkout_timeout)
            .error_handler(Box::new(LogErrors))
            .build_unchecked(manager);
        Pool {
            pool,
            epoch,
            last_error,
            checkout_timeout,
            step_timeout,
            server,
        }
    }

    /// How many connections the pool keeps at most.
    pub(crate) fn max_size(&self) -> u32 {
        self.pool.max_size()
    }

    /// Runs `f` on a pooled connection; `f` gets the attempt's number (0, then 1 for the retry
    /// `retry` allows). `what` names the step in errors.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        retry: Retry,
        mut f: impl FnMut(&mut Connection, u32) -> Result<T, CallError>,
    ) -> Result<T, StepFailure> {
        let deadline = Instant::now() + self.step_timeout;
        let mut con = self.checkout(what, deadline)?;
        con.set_step_deadline(Some(deadline));
        let first = f(&mut con, 0);
        con.set_step_deadline(None);
        match first {
            Err(error)
                if retry == Retry::OnConnectionFailure
                    && error.is_connection_failure()
                    && Instant::now() < deadline =>
            {
                self.note_failure();
                drop(con);
                tracing::debug!(server = %self.server, what, "retrying on a new connection");
                let mut con = self.checkout(what, deadline)?;
                con.set_step_deadline(Some(deadline));
                let result = f(&mut con, 1);
                con.set_step_deadline(None);
                if result.is_err() && !con.is_usable() {
                    self.note_failure();
                }
                result.map_err(StepFailure::Call)
            }
            Err(error) => {
                if !con.is_usable() {
                    self.note_failure();
                }
                Err(StepFailure::Call(error))
            }
            Ok(value) => Ok(value),
        }
    }

    /// A connection failed: every connection opened before now is suspect (a restarted server
    /// has closed them all), and is replaced at its next checkout.
    fn note_failure(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// A pooled connection, waited for at most the checkout timeout and never past the step's
    /// `deadline`.
    fn checkout(
        &self,
        what: &str,
        deadline: Instant,
    ) -> Result<r2d2::PooledConnection<Manager>, StepFailure> {
        let within = self.checkout_timeout.min(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        );
        // Connections opened before the last failure are discarded, at most a pool's worth.
        for _ in 0..=self.pool.max_size() {
            let mut con = self.pool.get_timeout(within).map_err(|error| {
                let cause = self
                    .last_error
                    .lock()
                    .clone()
                    .unwrap_or_else(|| error.to_string());
                StepFailure::Checkout(LockError::unavailable(
                    format!(
                        "no connection to {} within {within:?} while {what}: {cause}",
                        self.server
                    ),
                    error,
                ))
            })?;
            if con.epoch >= self.epoch.load(Ordering::Acquire) {
                return Ok(con);
            }
            con.broken = true;
        }
        Err(StepFailure::Checkout(LockError::unavailable(
            format!("no usable connection to {} while {what}", self.server),
            "every pooled connection predates the last connection failure",
        )))
    }
}

/// Why a step failed: no connection to run it on, or the call itself.
#[derive(Debug)]
pub(crate) enum StepFailure {
    Checkout(LockError),
    Call(CallError),
}
