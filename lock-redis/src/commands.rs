//! The command side: a pool of connections and the one way every operation uses it, with
//! `NOSCRIPT` handled and errors mapped.

use redis::{ConnectionLike, RedisError, RedisResult};

use lock_core::LockError;

use crate::config::Settings;
use crate::connection::{Connector, PooledConnection};
use crate::error::{breaks_connection, is_noscript, to_lock_error};
use crate::scripts::LuaScript;

/// The pool of command connections to one server. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Commands {
    pool: r2d2::Pool<Connector>,
    connector: Connector,
    checkout_timeout: std::time::Duration,
}

impl Commands {
    /// Builds the pool. It opens its connections in the background: `connect` has already
    /// checked with its own connection that the server answers.
    pub(crate) fn new(settings: &Settings, connector: Connector) -> Self {
        let pool = r2d2::Pool::builder()
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
        }
    }

    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Runs `f` on a pooled connection (opened after the last connection failure). `what`
    /// names the operation in errors.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        f: impl FnMut(&mut PooledConnection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        self.run_with(what, Retry::Never, f)
    }

    /// As [`run`](Self::run), retrying once on a fresh connection when `retry` allows it.
    pub(crate) fn run_with<T>(
        &self,
        what: &str,
        retry: Retry,
        f: impl FnMut(&mut PooledConnection) -> RedisResult<T>,
    ) -> Result<T, LockError> {
        self.run_mapped(what, retry, f, |error, server| {
            to_lock_error(error, what, server)
        })
    }

    /// As [`run_with`](Self::run_with), with the caller turning the server's errors into
    /// `LockError`s (`map` gets the error and the server's description).
    pub(crate) fn run_mapped<T>(
        &self,
        what: &str,
        retry: Retry,
        mut f: impl FnMut(&mut PooledConnection) -> RedisResult<T>,
        map: impl FnOnce(RedisError, &str) -> LockError,
    ) -> Result<T, LockError> {
        let result = match self.attempt(what, &mut f)? {
            Err(error) if retry.allows(&error) => {
                tracing::debug!(server = %self.connector.server, %error, what, "retrying on a new connection");
                self.attempt(what, &mut f)?
            }
            other => other,
        };
        result.map_err(|error| map(error, &self.connector.describe()))
    }

    fn attempt<T>(
        &self,
        what: &str,
        f: &mut impl FnMut(&mut PooledConnection) -> RedisResult<T>,
    ) -> Result<RedisResult<T>, LockError> {
        let mut con = self.checkout(what)?;
        let result = f(&mut con);
        con.note(&result);
        if let Err(error) = &result {
            if con.broken {
                self.connector.connection_broke();
                tracing::debug!(server = %self.connector.server, %error, "redis connection broke");
            }
        }
        Ok(result)
    }

    fn checkout(&self, what: &str) -> Result<r2d2::PooledConnection<Connector>, LockError> {
        // Connections opened before the last failure are discarded, at most a pool's worth.
        for _ in 0..=self.pool.max_size() {
            let mut con = self.pool.get().map_err(|error| {
                LockError::unavailable(
                    format!(
                        "no connection to {} within the checkout timeout ({:?}) while {what}",
                        self.connector.describe(),
                        self.checkout_timeout
                    ),
                    error,
                )
            })?;
            if con.epoch >= self.connector.current_epoch() {
                return Ok(con);
            }
            con.broken = true;
        }
        Err(LockError::unavailable(
            format!(
                "no usable connection to {} while {what}",
                self.connector.describe()
            ),
            "every pooled connection predates the last connection failure",
        ))
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

/// Runs `query` and, if the server answered `NOSCRIPT`, loads `script` and runs it again.
pub(crate) fn with_reload<C: ConnectionLike, T>(
    con: &mut C,
    script: &LuaScript,
    mut query: impl FnMut(&mut C) -> RedisResult<T>,
) -> RedisResult<T> {
    match query(con) {
        Err(error) if is_noscript(&error) => {
            tracing::debug!(
                script = script.name,
                "script missing on the server, loading it"
            );
            script.load(con)?;
            query(con)
        }
        other => other,
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
