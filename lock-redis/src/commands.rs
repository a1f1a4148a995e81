//! The command side: a pool of connections (to one server, or to a cluster) and the one way
//! every operation uses it, with retries and errors mapped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};
use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use dlock_core::LockError;

use crate::config::Settings;
use crate::connection::{Connect, Connector, Endpoint, Pooled};
use crate::error::{breaks_connection, to_lock_error};
use crate::layout::ScriptCall;
use crate::scripts::Announce;

/// How many threads open a pool's connections in the background (r2d2's own default).
const POOL_WORKERS: usize = 3;

/// The pool of command connections of `C` (to one server by default). Cheap to clone.
///
/// The pool's background workers (opening connections, closing idle ones) are its own and stop
/// as soon as the last clone is dropped: r2d2's default workers would finish the periodic idle
/// check scheduled up to 30 s ahead first, so every dropped backend left three threads behind
/// for that long.
pub(crate) struct Commands<C: Connect = Connector> {
    pool: r2d2::Pool<C>,
    connector: C,
    checkout_timeout: Duration,
    /// What one step may take, from its start to its answer, the wait for a connection and a
    /// second attempt included.
    response_timeout: Duration,
}

impl<C: Connect> Clone for Commands<C> {
    fn clone(&self) -> Self {
        Commands {
            pool: self.pool.clone(),
            connector: self.connector.clone(),
            checkout_timeout: self.checkout_timeout,
            response_timeout: self.response_timeout,
        }
    }
}

impl<C> Commands<C>
where
    C: Connect,
    C::Connection: Pooled,
{
    /// Builds the pool. It opens its connections in the background: `connect` has already
    /// checked with its own connection that the server answers.
    pub(crate) fn new(settings: &Settings, connector: C) -> Self {
        let workers = ScheduledThreadPool::builder()
            .num_threads(POOL_WORKERS)
            .thread_name_pattern("dlock-pool-{}")
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build();
        let pool = r2d2::Pool::builder()
            .thread_pool(Arc::new(workers))
            .max_size(settings.pool_size)
            .min_idle(Some(1))
            // A PING per checkout would double the cost of every lock operation; broken
            // connections are found by the error they raise and never returned to the pool.
            .test_on_check_out(false)
            .connection_timeout(settings.checkout_timeout)
            .error_handler(Box::new(LogErrors))
            .build_unchecked(connector.clone());
        Commands {
            pool,
            connector,
            checkout_timeout: settings.checkout_timeout,
            response_timeout: settings.response_timeout,
        }
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        self.connector.endpoint()
    }

    /// Runs `f` on a pooled connection (opened after the last connection failure). `what`
    /// names the operation in errors.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        self.run_with(what, Retry::Never, f)
    }

    /// As [`run`](Self::run), retrying once on a fresh connection when `retry` allows it.
    pub(crate) fn run_with<T>(
        &self,
        what: &str,
        retry: Retry,
        f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        self.run_mapped(what, retry, f, |error, server| {
            to_lock_error(error, what, server)
        })
    }

    /// Runs `f` once on a pooled connection, the wait for the connection and the replies over
    /// by `deadline` (a step's share of a larger step's time).
    pub(crate) fn run_by<T>(
        &self,
        what: &str,
        deadline: Instant,
        mut f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        self.attempt(what, &mut f, deadline)?
            .map_err(|error| to_lock_error(error, what, &self.endpoint().describe()))
    }

    /// As [`run_with`](Self::run_with), with the caller turning the server's errors into
    /// `LockError`s (`map` gets the error and the server's description).
    pub(crate) fn run_mapped<T>(
        &self,
        what: &str,
        retry: Retry,
        mut f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
        map: impl FnOnce(RedisError, &str) -> LockError,
    ) -> Result<T, LockError> {
        let deadline = Instant::now() + self.response_timeout;
        let first = self.attempt(what, &mut f, deadline)?;
        self.after_first(what, retry, first, f, map, deadline)
    }

    /// As [`run_with`](Self::run_with), once the first attempt has been made by the caller on
    /// a connection of this pool (see [`try_checkout`](Self::try_checkout)), its outcome
    /// recorded with [`settle`](Self::settle): `f` runs again when `retry` allows it.
    pub(crate) fn run_after<T>(
        &self,
        what: &str,
        retry: Retry,
        first: RedisResult<T>,
        f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        // The first attempt was made on a connection of its own: a second gets a step's time.
        let deadline = Instant::now() + self.response_timeout;
        self.after_first(
            what,
            retry,
            first,
            f,
            |error, server| to_lock_error(error, what, server),
            deadline,
        )
    }

    /// A second attempt when `retry` allows it: within the step's `deadline`, or, for a step
    /// whose second run replays the first (a latched release, retried after a time-out too),
    /// with a response timeout of its own.
    fn after_first<T>(
        &self,
        what: &str,
        retry: Retry,
        first: RedisResult<T>,
        mut f: impl FnMut(&mut C::Connection) -> RedisResult<T>,
        map: impl FnOnce(RedisError, &str) -> LockError,
        deadline: Instant,
    ) -> Result<T, LockError> {
        let now = Instant::now();
        let retry_by = match retry {
            Retry::OnAnyConnectionError => Some(deadline.max(now + self.response_timeout)),
            _ => Some(deadline).filter(|deadline| now < *deadline),
        };
        let result = match (first, retry_by) {
            (Err(error), Some(retry_by)) if retry.allows(&error) => {
                tracing::debug!(server = %self.endpoint().server, %error, what, "retrying on a new connection");
                self.attempt(what, &mut f, retry_by)?
            }
            (other, _) => other,
        };
        result.map_err(|error| map(error, &self.endpoint().describe()))
    }

    /// One attempt, over by `deadline`: the wait for a connection and the replies together.
    fn attempt<T>(
        &self,
        what: &str,
        f: &mut impl FnMut(&mut C::Connection) -> RedisResult<T>,
        deadline: Instant,
    ) -> Result<RedisResult<T>, LockError> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let mut con = self.checkout_within(what, self.checkout_timeout.min(left))?;
        con.set_step_deadline(Some(deadline));
        let result = f(&mut con);
        con.set_step_deadline(None);
        self.settle(&mut con, &result);
        Ok(result)
    }

    /// A pooled connection that is free now and was opened after the last connection failure,
    /// without waiting: `None` when every connection is in use (or none is open).
    pub(crate) fn try_checkout(&self) -> Option<r2d2::PooledConnection<C>> {
        let endpoint = self.endpoint();
        // Connections opened before the last failure are discarded, at most a pool's worth.
        for _ in 0..=self.pool.max_size() {
            let mut con = self.pool.try_get()?;
            if con.epoch() >= endpoint.current_epoch() {
                return Some(con);
            }
            *con.broken() = true;
        }
        None
    }

    /// Records the outcome of an attempt on `con`: a connection-level error breaks it, and
    /// every connection opened before it is distrusted.
    pub(crate) fn settle<T>(&self, con: &mut C::Connection, result: &RedisResult<T>) {
        con.note(result);
        if let Err(error) = result {
            if *con.broken() {
                self.endpoint().connection_broke();
                tracing::debug!(server = %self.endpoint().server, %error, "redis connection broke");
            }
        }
    }

    fn checkout(&self, what: &str) -> Result<r2d2::PooledConnection<C>, LockError> {
        self.checkout_within(what, self.checkout_timeout)
    }

    fn checkout_within(
        &self,
        what: &str,
        timeout: Duration,
    ) -> Result<r2d2::PooledConnection<C>, LockError> {
        let endpoint = self.endpoint();
        // Connections opened before the last failure are discarded, at most a pool's worth.
        for _ in 0..=self.pool.max_size() {
            let mut con = self.pool.get_timeout(timeout).map_err(|error| {
                LockError::unavailable(
                    format!(
                        "no connection to {} within {:?} while {what}",
                        endpoint.describe(),
                        timeout
                    ),
                    error,
                )
            })?;
            if con.epoch() >= endpoint.current_epoch() {
                return Ok(con);
            }
            *con.broken() = true;
        }
        Err(LockError::unavailable(
            format!(
                "no usable connection to {} while {what}",
                endpoint.describe()
            ),
            "every pooled connection predates the last connection failure",
        ))
    }
}

impl Commands<Connector> {
    /// Writes `cmd` on a pooled connection and does not wait for its reply (read, and dropped,
    /// after the connection's next command): for messages whose answer nobody needs.
    pub(crate) fn send_unanswered(&self, what: &str, cmd: &redis::Cmd) -> Result<(), LockError> {
        let mut con = self.checkout(what)?;
        con.send_unanswered(cmd);
        if con.broken {
            self.endpoint().connection_broke();
            return Err(LockError::unavailable(
                format!("{} unavailable while {what}", self.endpoint().describe()),
                "the connection failed",
            ));
        }
        Ok(())
    }

    /// Writes `calls` as one pipeline on a connection that is free now, without waiting for
    /// the replies: the first half of a step sent to several servers at once (see
    /// [`InFlight`]). `None` when every pooled connection is in use (or none is open): nothing
    /// was sent.
    pub(crate) fn try_send(
        &self,
        what: &str,
        calls: &[ScriptCall],
    ) -> Option<Result<InFlight, LockError>> {
        let con = self.try_checkout()?;
        Some(self.write(what, con, calls))
    }

    /// As [`try_send`](Self::try_send), waiting for a connection: while the server is
    /// reachable and the pool has connections open (in use by other threads, so one comes back
    /// soon), up to the checkout timeout; else (a connection broke or failed to open, or none
    /// is open yet), up to `unreachable_after`. Waiting for the pool is this process's own
    /// congestion, not the server's slowness: the caller counts the server's time from the
    /// send.
    pub(crate) fn send_when_free(
        &self,
        what: &str,
        calls: &[ScriptCall],
        unreachable_after: Duration,
    ) -> Result<InFlight, LockError> {
        let timeout = if self.endpoint().is_reachable() && self.pool.state().connections > 0 {
            self.checkout_timeout
        } else {
            unreachable_after.min(self.checkout_timeout)
        };
        let con = self.checkout_within(what, timeout.max(Duration::from_millis(1)))?;
        self.write(what, con, calls)
    }

    /// Writes `calls` to `con` as one pipeline, replies unread. The scripts announce releases
    /// with `PUBLISH`: steps sent this way go to single servers (RedLock's nodes).
    fn write(
        &self,
        what: &str,
        mut con: r2d2::PooledConnection<Connector>,
        calls: &[ScriptCall],
    ) -> Result<InFlight, LockError> {
        match con.send_encoded(|out| write_calls(out, calls)) {
            Ok(()) => Ok(InFlight {
                con,
                count: calls.len(),
                connector: self.connector.clone(),
            }),
            Err(error) => {
                con.broken = true;
                self.endpoint().connection_broke();
                Err(to_lock_error(error, what, &self.endpoint().describe()))
            }
        }
    }
}

/// A pipeline written to a server whose replies have not been read yet.
pub(crate) struct InFlight {
    con: r2d2::PooledConnection<Connector>,
    count: usize,
    connector: Connector,
}

impl InFlight {
    /// Reads the pipeline's replies (a script's error as `Value::ServerError`), waiting at
    /// most until `deadline`. After an error (a time-out, a broken connection) the connection
    /// is not reused: [`abandon`](InFlight::abandon) it.
    pub(crate) fn receive(&mut self, deadline: Instant) -> Result<Vec<Value>, RedisError> {
        self.con.read_replies(self.count, deadline)
    }

    /// Keeps the command of `words` to be written with the connection's next command, its reply skipped (see
    /// [`PooledConnection::defer`](crate::connection::PooledConnection::defer)).
    pub(crate) fn defer(&mut self, words: &[&[u8]]) {
        self.con.defer(words);
    }

    /// Gives the connection up with its replies unread: `undo` is written after the pipeline
    /// (so a server that runs the pipeline late runs the undo right after it), and the
    /// connection is closed instead of going back to the pool.
    pub(crate) fn abandon(mut self, undo: &[redis::Cmd]) {
        if !undo.is_empty() {
            let mut pipe = redis::pipe();
            for cmd in undo {
                pipe.add_command(cmd.clone());
            }
            let _ = self.con.send_packed(&pipe.get_packed_pipeline());
        }
        self.con.broken = true;
        self.connector.endpoint.connection_broke();
    }

    /// Sends `calls` on this connection after a NOSCRIPT, once their scripts are loaded, and
    /// reads their replies within `deadline`.
    pub(crate) fn resend(
        &mut self,
        calls: &[ScriptCall],
        deadline: Instant,
    ) -> Result<Vec<Value>, RedisError> {
        let scripts = calls.iter().map(|call| call.script);
        crate::scripts::load_missing(&mut *self.con, scripts, Announce::Publish)?;
        self.con.send_encoded(|out| write_calls(out, calls))?;
        self.count = calls.len();
        self.receive(deadline)
    }
}

fn write_calls(out: &mut Vec<u8>, calls: &[ScriptCall]) {
    for call in calls {
        call.write_to(out, Announce::Publish);
    }
}

/// When an operation may be sent a second time after a connection failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Never: running it twice could report a wrong result.
    Never,
    /// When the connection was found closed or reset (typically a pooled connection to a server
    /// that restarted or dropped its clients), not after a timeout. For operations whose second
    /// run is harmless: a repeated acquire only re-counts a hold the client releases whole,
    /// a repeated renewal or status read changes nothing.
    OnDroppedConnection,
    /// After any connection failure, timeouts included: for the release, whose latch makes a
    /// second run replay the first one's result.
    OnAnyConnectionError,
}

impl Retry {
    fn allows(self, error: &RedisError) -> bool {
        if !breaks_connection(error) {
            return false;
        }
        match self {
            Retry::Never => false,
            Retry::OnDroppedConnection => !error.is_timeout(),
            Retry::OnAnyConnectionError => true,
        }
    }
}

/// Sends r2d2's background connection errors to `tracing` instead of the `log` crate.
#[derive(Debug)]
struct LogErrors;

impl r2d2::HandleError<RedisError> for LogErrors {
    fn handle_error(&self, error: RedisError) {
        tracing::warn!(%error, "could not open a redis connection for the pool");
    }
}
