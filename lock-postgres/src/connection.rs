//! One blocking connection to PostgreSQL: a `tokio-postgres` client and its connection, driven
//! on a current-thread runtime of its own (as the synchronous `postgres` crate does), with every
//! call bounded by a timeout.
//!
//! The `postgres` crate offers no bound on waiting for an answer: a server that stops answering
//! (paused, partitioned without a reset) would hold a lock call forever. Here each call runs
//! under `tokio::time::timeout`; a call that times out is cancelled on the server (its work
//! would else go on after the caller gave up), and leaves the connection broken: the pool
//! discards it.
//!
//! A connection's runtime cannot run on a thread that is already driving an async runtime (a
//! task of the application's tokio runtime calling the blocking API, or a guard dropped there):
//! tokio refuses to block such a thread. A call made there runs on a thread of its own for the
//! call (see [`off_runtime`]), and a connection dropped there shuts its runtime down without
//! blocking.

use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, CancelToken, Client, NoTls, Notification, Row, Statement};

use crate::tls::Tls;

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No answer within the timeout: the request may or may not have run.
    TimedOut(Duration),
    /// The client library's error: the server's (an `ERROR` answer) or the connection's.
    Db(tokio_postgres::Error),
    /// A failure outside the protocol: the runtime could not start, the server closed a
    /// listening connection.
    Io(std::io::Error),
}

impl CallError {
    /// Whether the connection failed under the call (closed, reset): a retry on a fresh
    /// connection may work. A timeout is not one: the server is slow or stopped, and a retry
    /// would only double the wait.
    pub(crate) fn is_connection_failure(&self) -> bool {
        match self {
            CallError::TimedOut(_) => false,
            CallError::Io(_) => true,
            CallError::Db(error) => error.as_db_error().is_none_or(|db| {
                // The server ended the session (pg_terminate_backend, a shutdown).
                db.code().code().starts_with("57P") || db.code().code().starts_with("08")
            }),
        }
    }
}

/// The part of a `tokio_postgres::Connection` the driving loop needs, whatever its stream.
pub(crate) trait Drive: Send {
    fn poll_message(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<AsyncMessage, tokio_postgres::Error>>>;
}

impl<S, T> Drive for tokio_postgres::Connection<S, T>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    fn poll_message(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<AsyncMessage, tokio_postgres::Error>>> {
        tokio_postgres::Connection::poll_message(self, cx)
    }
}

/// A statement the backend runs, by its index in the backend's list, with its SQL and the types
/// of its parameters (for servers reached without named prepared statements).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql<'a> {
    pub(crate) index: usize,
    pub(crate) text: &'a str,
    pub(crate) types: &'a [Type],
}

/// The runtime and the connection's I/O: what drives a call's future.
struct Io {
    /// Always present; taken only when the connection is dropped.
    runtime: Option<Runtime>,
    driver: Box<dyn Drive>,
    notifications: VecDeque<Notification>,
    /// When the step using the connection must be over (see [`Connection::set_step_deadline`]).
    step_deadline: Option<Instant>,
    /// Stops the server's work on a call that ran out of time.
    canceller: Canceller,
}

/// How long a cancel request may take: its connection, sent and closed (not the call's own
/// timeout, which near a step's deadline may be a millisecond).
const CANCEL_LIMIT: Duration = Duration::from_millis(200);

/// How long the call's end is read once a cancel was sent: a statement waiting for a lock
/// stops at once; one whose request never reached the server (held up in the network) never
/// answers.
const END_AFTER_CANCEL: Duration = Duration::from_millis(20);

/// How many cancels a call that ran out of time gets: a cancel that reaches the session before
/// it has read the call's request (still in its socket) is ignored, and the statement then
/// runs; the next one stops it.
const CANCELS: usize = 2;

/// Cancels the statement the server runs for a connection (PostgreSQL's cancel request, on a
/// connection of its own), for a call whose caller stops waiting: else the server would run
/// it later, whenever what held it up (a row another session holds) let it go, after the
/// caller had gone on (sent the step again, undone it, given up).
struct Canceller {
    token: CancelToken,
    tls: Tls,
}

impl Canceller {
    async fn cancel(&self) -> Result<(), tokio_postgres::Error> {
        match &self.tls {
            Tls::Plain => self.token.cancel_query(NoTls).await,
            #[cfg(feature = "tls")]
            Tls::Rustls(make) => self.token.cancel_query(make.clone()).await,
        }
    }
}

impl Io {
    /// Runs `future`, driving the connection meanwhile, for at most `timeout` and never past
    /// the step's deadline. A call that runs out of time is cancelled on the server, and its
    /// end read for a little longer (see [`CANCEL_LIMIT`], [`END_AFTER_CANCEL`]): its own
    /// answer if it finished first, else the time-out (it did not run, or, with no answer at
    /// all, may have). A call whose connection failed is cancelled too.
    fn drive<T: Send>(
        &mut self,
        timeout: Duration,
        future: impl Future<Output = Result<T, tokio_postgres::Error>> + Send,
    ) -> Result<T, CallError> {
        let timeout = match self.step_deadline {
            Some(deadline) => timeout
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            None => timeout,
        };
        let Io {
            runtime,
            driver,
            notifications,
            canceller,
            ..
        } = self;
        let runtime = runtime.as_ref().ok_or_else(closed)?;
        let result = off_runtime(|| {
            runtime.block_on(async {
                let mut future = pin!(future);
                let driven = poll_fn(|cx| {
                    loop {
                        match driver.poll_message(cx) {
                            Poll::Ready(Some(Ok(AsyncMessage::Notification(notification)))) => {
                                notifications.push_back(notification);
                            }
                            Poll::Ready(Some(Ok(_))) => {}
                            Poll::Ready(Some(Err(error))) => {
                                return Poll::Ready(Err(CallError::Db(error)));
                            }
                            // The connection is over: the call's answer will never come.
                            Poll::Ready(None) => return Poll::Ready(Err(closed())),
                            Poll::Pending => break,
                        }
                    }
                    future.as_mut().poll(cx).map_err(CallError::Db)
                });
                let mut driven = pin!(driven);
                if let Ok(answer) = tokio::time::timeout(timeout, driven.as_mut()).await {
                    if matches!(&answer, Err(error) if error.is_connection_failure()) {
                        // The server notices a lost client only when it answers: a statement
                        // waiting for a lock would run when it got it, after the call's copy
                        // or its caller's giving up.
                        let _ = tokio::time::timeout(CANCEL_LIMIT, canceller.cancel()).await;
                    }
                    return Some(answer);
                }
                for _ in 0..CANCELS {
                    // Not sent (the server does not answer): the call stays unknown.
                    tokio::time::timeout(CANCEL_LIMIT, canceller.cancel())
                        .await
                        .ok()?
                        .ok()?;
                    if let Ok(answer) =
                        tokio::time::timeout(END_AFTER_CANCEL, driven.as_mut()).await
                    {
                        return Some(answer);
                    }
                }
                None
            })
        })?;
        match result {
            // Stopped by the cancel: it did not run.
            Some(Err(CallError::Db(error))) if is_cancelled(&error) => {
                Err(CallError::TimedOut(timeout))
            }
            Some(answer) => answer,
            None => Err(CallError::TimedOut(timeout)),
        }
    }
}

/// Whether `error` is the server's "canceling statement due to user request".
fn is_cancelled(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|db| db.code() == &tokio_postgres::error::SqlState::QUERY_CANCELED)
}

impl Drop for Io {
    /// Without blocking: a connection may be dropped on a thread that drives an async runtime
    /// (the application's), where dropping a runtime the usual way panics.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `call` (which blocks on a connection's own runtime) on the calling thread, or, when
/// that thread is inside an async runtime's context, where tokio refuses to block, on a thread
/// of its own for the call: the blocking API works from inside a task, as from any thread,
/// instead of panicking with "Cannot start a runtime from within a runtime".
pub(crate) fn off_runtime<T: Send>(call: impl FnOnce() -> T + Send) -> Result<T, CallError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(call());
    }
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("dlock-pg-call".into())
            .spawn_scoped(scope, call)
            .map_err(CallError::Io)?;
        match thread.join() {
            Ok(answer) => Ok(answer),
            // The call's own panic, passed on as if it had run here.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// An open connection.
pub(crate) struct Connection {
    io: Io,
    client: Client,
    /// Prepared statements, by the index of their SQL.
    statements: HashMap<usize, Statement>,
    /// Whether statements are prepared once and named (off behind a transaction pooler).
    prepare: bool,
    /// A call failed in a way that leaves the connection unusable.
    pub(crate) broken: bool,
    /// The failure count of the pool when this connection was opened: a connection older than
    /// the pool's last failure is not trusted.
    pub(crate) epoch: u64,
    /// The latch of this connection's last release whose answer arrived: the next release on
    /// this connection deletes it.
    pub(crate) latch_to_forget: Option<i64>,
}

impl Connection {
    /// Opens a connection with `config` (every host in turn, as libpq does), the whole of it
    /// (TCP, TLS, startup, authentication) bounded by `within`.
    pub(crate) fn open(
        config: &tokio_postgres::Config,
        tls: &Tls,
        within: Duration,
        prepare: bool,
        epoch: u64,
    ) -> Result<Connection, CallError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(CallError::Io)?;
        let connected = off_runtime(|| {
            runtime.block_on(async {
                let connected = tokio::time::timeout(within, tls.connect(config)).await;
                match connected {
                    Ok(result) => result.map_err(CallError::Db),
                    Err(_) => Err(CallError::TimedOut(within)),
                }
            })
        });
        let (client, driver) = match connected {
            Ok(Ok(connected)) => connected,
            Ok(Err(error)) | Err(error) => {
                // Not dropped the usual way: this may be a thread of an async runtime.
                runtime.shutdown_background();
                return Err(error);
            }
        };
        let canceller = Canceller {
            token: client.cancel_token(),
            tls: tls.clone(),
        };
        Ok(Connection {
            io: Io {
                runtime: Some(runtime),
                driver,
                notifications: VecDeque::new(),
                step_deadline: None,
                canceller,
            },
            client,
            statements: HashMap::new(),
            prepare,
            broken: false,
            epoch,
            latch_to_forget: None,
        })
    }

    /// Marks the connection broken when `result` says it is.
    fn checked<T>(&mut self, result: Result<T, CallError>) -> Result<T, CallError> {
        if let Err(error) = &result {
            if error.is_connection_failure()
                || matches!(error, CallError::TimedOut(_))
                || self.client.is_closed()
            {
                self.broken = true;
            }
        }
        result
    }

    /// Bounds what the step now using the connection may still wait for it: until `deadline`
    /// (`None`: each call its own timeout).
    pub(crate) fn set_step_deadline(&mut self, deadline: Option<Instant>) {
        self.io.step_deadline = deadline;
    }

    /// Runs `sql` with `params` and returns its rows: a prepared statement (prepared on first
    /// use), or an unnamed one parsed with every call when statements are not prepared. At most
    /// `timeout` for each round trip.
    pub(crate) fn query(
        &mut self,
        timeout: Duration,
        sql: Sql<'_>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, CallError> {
        if self.client.is_closed() {
            self.broken = true;
            return Err(closed());
        }
        if !self.prepare {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
                .iter()
                .zip(sql.types)
                .map(|(param, ty)| (*param, ty.clone()))
                .collect();
            let result = self
                .io
                .drive(timeout, self.client.query_typed(sql.text, &typed));
            return self.checked(result);
        }
        let statement = match self.statements.get(&sql.index) {
            Some(statement) => statement.clone(),
            None => {
                let result = self
                    .io
                    .drive(timeout, self.client.prepare_typed(sql.text, sql.types));
                let statement = self.checked(result)?;
                self.statements.insert(sql.index, statement.clone());
                statement
            }
        };
        let result = self
            .io
            .drive(timeout, self.client.query(&statement, params));
        self.checked(result)
    }

    /// Runs `text` (one or more statements, no parameters) with the simple query protocol.
    pub(crate) fn batch(&mut self, timeout: Duration, text: &str) -> Result<(), CallError> {
        let result = self.io.drive(timeout, self.client.batch_execute(text));
        self.checked(result)
    }

    /// Runs one statement without parameters and returns its rows (simple query protocol, text
    /// values).
    pub(crate) fn simple(
        &mut self,
        timeout: Duration,
        text: &str,
    ) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, CallError> {
        let result = self.io.drive(timeout, self.client.simple_query(text));
        self.checked(result)
    }

    /// Waits for the next notification (one already received comes at once), until `wake` is
    /// notified or `until` passes (then `None`). With no `until`, no bound in time: a listening
    /// connection is idle until something happens.
    pub(crate) fn next_notification(
        &mut self,
        wake: &tokio::sync::Notify,
        until: Option<Instant>,
    ) -> Result<Option<Notification>, CallError> {
        if let Some(notification) = self.io.notifications.pop_front() {
            return Ok(Some(notification));
        }
        let Io {
            runtime, driver, ..
        } = &mut self.io;
        let runtime = runtime.as_ref().ok_or_else(closed)?;
        // Only the backend's listening thread waits here; the rule is kept all the same.
        let result = off_runtime(|| {
            runtime.block_on(async {
                let mut woken = pin!(wake.notified());
                let mut due = pin!(async {
                    match until {
                        Some(until) => tokio::time::sleep_until(until.into()).await,
                        None => std::future::pending().await,
                    }
                });
                poll_fn(|cx| loop {
                    match driver.poll_message(cx) {
                        Poll::Ready(Some(Ok(AsyncMessage::Notification(notification)))) => {
                            return Poll::Ready(Ok(Some(notification)));
                        }
                        Poll::Ready(Some(Ok(_))) => {}
                        Poll::Ready(Some(Err(error))) => {
                            return Poll::Ready(Err(CallError::Db(error)))
                        }
                        Poll::Ready(None) => return Poll::Ready(Err(closed())),
                        Poll::Pending => {
                            if woken.as_mut().poll(cx).is_ready()
                                || due.as_mut().poll(cx).is_ready()
                            {
                                return Poll::Ready(Ok(None));
                            }
                            return Poll::Pending;
                        }
                    }
                })
                .await
            })
        })
        .and_then(|result| result);
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Whether the connection can still be used.
    pub(crate) fn is_usable(&self) -> bool {
        !self.broken && !self.client.is_closed()
    }
}

/// The error of a call on a connection the server has closed.
fn closed() -> CallError {
    CallError::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the server closed the connection",
    ))
}
