//! Calls to etcd's gateway: a pool of kept-alive connections over the configured endpoints,
//! the auth token, and what each failure means for the caller.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock_core::LockError;
use parking_lot::{Condvar, Mutex, RwLock};
use serde_json::{json, Value};

use crate::http::{Connection, Dialer, Endpoint};
use crate::wire::Json;

/// Idle connections kept per backend.
const IDLE_CONNECTIONS: usize = 16;

/// Calls in flight at once per backend: a thousand threads asking at once queue here (each
/// within its request timeout) rather than open a thousand connections to one member.
const IN_FLIGHT: usize = 32;

/// Whether a request may be sent again after its answer was lost: reads and lease keep-alives
/// may; a write whose outcome is unknown is told to the caller instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    Safe,
    Never,
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The lease named in a put does not exist (any more).
    LeaseNotFound,
    /// The watch's start revision was compacted.
    Compacted,
    /// The request never left: no place among the calls in flight, or no endpoint could be
    /// connected to, in time. Nothing was done (a write's outcome is known).
    NotSent(LockError),
    /// Anything else, as the caller reports it.
    Lock(LockError),
}

impl From<Fail> for LockError {
    fn from(fail: Fail) -> Self {
        match fail {
            Fail::LeaseNotFound => LockError::protocol("etcd: requested lease not found"),
            Fail::Compacted => LockError::protocol("etcd: required revision has been compacted"),
            Fail::NotSent(error) | Fail::Lock(error) => error,
        }
    }
}

impl From<LockError> for Fail {
    fn from(error: LockError) -> Self {
        Fail::Lock(error)
    }
}

pub(crate) struct Transport {
    endpoints: Vec<Endpoint>,
    dialer: Dialer,
    preferred: AtomicUsize,
    idle: Mutex<Vec<Connection>>,
    pub(crate) timeout: Duration,
    credentials: Option<(String, String)>,
    token: RwLock<Option<String>>,
    in_flight: Mutex<usize>,
    slot_freed: Condvar,
}

/// A call's place among the calls in flight.
struct Slot<'a>(&'a Transport);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.in_flight.lock() -= 1;
        self.0.slot_freed.notify_one();
    }
}

impl Transport {
    /// Waits (until the call's `deadline`) for a place among the calls in flight.
    fn slot(&self, deadline: Instant) -> Result<Slot<'_>, Fail> {
        let mut in_flight = self.in_flight.lock();
        while *in_flight >= IN_FLIGHT {
            if self
                .slot_freed
                .wait_until(&mut in_flight, deadline)
                .timed_out()
            {
                return Err(Fail::NotSent(LockError::unavailable(
                    format!(
                        "no etcd call could start within {:?}: {IN_FLIGHT} calls in flight \
                         (not sent)",
                        self.timeout
                    ),
                    io::Error::from(io::ErrorKind::TimedOut),
                )));
            }
        }
        *in_flight += 1;
        Ok(Slot(self))
    }

    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        dialer: Dialer,
        timeout: Duration,
        credentials: Option<(String, String)>,
    ) -> Self {
        Transport {
            endpoints,
            dialer,
            preferred: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
            timeout,
            credentials,
            token: RwLock::new(None),
            in_flight: Mutex::new(0),
            slot_freed: Condvar::new(),
        }
    }

    /// How many endpoints it has.
    pub(crate) fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    /// The endpoints, as `host:port`, for messages.
    pub(crate) fn describe(&self) -> String {
        self.endpoints
            .iter()
            .map(Endpoint::authority)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Authenticates if credentials are set (at build, and when a token expires).
    pub(crate) fn authenticate(&self) -> Result<(), LockError> {
        let Some((user, password)) = &self.credentials else {
            return Ok(());
        };
        let body = Json::from(json!({ "name": user, "password": password }));
        let deadline = Instant::now() + self.timeout;
        match self.exchange("/v3/auth/authenticate", &body, None, Resend::Safe, deadline) {
            Ok(answer) => {
                let token = answer["token"].as_str().unwrap_or_default().to_owned();
                if token.is_empty() {
                    return Err(LockError::config(format!(
                        "etcd at {} gave user {user:?} no token (is authentication enabled?)",
                        self.describe()
                    )));
                }
                *self.token.write() = Some(token);
                Ok(())
            }
            Err(Fail::Lock(LockError::Protocol { message, .. })) => Err(LockError::config(
                format!("etcd refused user {user:?}: {message}"),
            )),
            Err(fail) => Err(fail.into()),
        }
    }

    /// Calls `path` with `body`: the answer's JSON, or why not, within the request timeout
    /// (the wait for a place among the calls in flight, connecting and every endpoint tried
    /// included).
    pub(crate) fn call(&self, path: &str, body: &Json, resend: Resend) -> Result<Value, Fail> {
        let deadline = Instant::now() + self.timeout;
        let token = self.token.read().clone();
        match self.exchange(path, body, token.as_deref(), resend, deadline) {
            Err(Fail::Lock(LockError::Config { .. })) if self.credentials.is_some() => {
                // An expired token: a new one, and the request again (it was refused unread).
                self.authenticate()?;
                let token = self.token.read().clone();
                self.exchange(path, body, token.as_deref(), resend, deadline)
            }
            other => other,
        }
    }

    fn exchange(
        &self,
        path: &str,
        body: &Json,
        token: Option<&str>,
        resend: Resend,
        deadline: Instant,
    ) -> Result<Value, Fail> {
        let _slot = self.slot(deadline)?;
        let bytes = body.as_bytes();
        let mut last: Option<(Endpoint, io::Error)> = None;
        // Whether the request was written on some connection (then a read's failure is not a
        // write's unknown outcome, but the server may have received it).
        let mut sent = false;
        // Each endpoint once, the preferred one first; a connection that failed before the
        // request went out is tried on the next; all within the call's deadline.
        let mut next_attempt = 0;
        let mut pause = BETWEEN_LEADERS_FIRST_PAUSE;
        loop {
            let attempt = next_attempt;
            next_attempt += 1;
            if attempt > self.endpoints.len().max(1) || Instant::now() >= deadline {
                break;
            }
            let (mut connection, pooled) = match self.connection(attempt, deadline) {
                Ok(found) => found,
                Err((endpoint, error)) => {
                    last = Some((endpoint, error));
                    self.rotate();
                    continue;
                }
            };
            sent = true;
            match connection.post(path, token, bytes, deadline) {
                Ok(response) => {
                    let answer = decode(response.status, &response.body, &connection.endpoint);
                    if answer.is_ok() || matches!(answer, Err(Fail::LeaseNotFound)) {
                        self.give_back(connection);
                    }
                    // A member between leaders refused it: a request that may be sent again
                    // is, a moment later, to the next member, while the call's time lasts.
                    if resend == Resend::Safe
                        && between_leaders(&answer)
                        && Instant::now() + pause < deadline
                    {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(BETWEEN_LEADERS_LAST_PAUSE);
                        self.rotate();
                        next_attempt = 1;
                        continue;
                    }
                    return answer;
                }
                // A kept-alive connection that failed: a request that may be sent again is,
                // on a fresh one. A write is not: the connection was open when it was written
                // (see `connection`), so the server may have received it and only the reply
                // was lost; its outcome is unknown.
                Err(error) if pooled && is_stale(&error) && resend == Resend::Safe => {
                    last = Some((connection.endpoint.clone(), error))
                }
                Err(error) if resend == Resend::Safe => {
                    last = Some((connection.endpoint.clone(), error));
                    self.rotate();
                }
                Err(error) => {
                    self.rotate();
                    return Err(Fail::Lock(LockError::unavailable(
                        format!(
                            "etcd at {} did not answer {path}{} (its outcome is unknown)",
                            connection.endpoint.authority(),
                            timed_out(&error, self.timeout)
                        ),
                        error,
                    )));
                }
            }
        }
        let (cause, error) = match last {
            Some((endpoint, error)) => (
                format!(
                    " (last tried: {}: {})",
                    endpoint.authority(),
                    cause(&error, self.timeout)
                ),
                error,
            ),
            None => (
                format!(": timed out after {:?}", self.timeout),
                io::Error::from(io::ErrorKind::TimedOut),
            ),
        };
        let error = LockError::unavailable(
            format!(
                "no etcd endpoint of {} answered {path}{cause}",
                self.describe()
            ),
            error,
        );
        Err(if sent {
            Fail::Lock(error)
        } else {
            Fail::NotSent(error)
        })
    }

    /// A pooled connection the server has not closed (first attempt only) or a new one to the
    /// preferred endpoint, made by `deadline`.
    fn connection(
        &self,
        attempt: usize,
        deadline: Instant,
    ) -> Result<(Connection, bool), (Endpoint, io::Error)> {
        if attempt == 0 {
            loop {
                let Some(connection) = self.idle.lock().pop() else {
                    break;
                };
                if !connection.is_closed() {
                    return Ok((connection, true));
                }
            }
        }
        let endpoint = self.preferred_endpoint();
        let within = deadline.saturating_duration_since(Instant::now());
        Connection::open_within(&endpoint, &self.dialer, within)
            .map(|c| (c, false))
            .map_err(|error| (endpoint, error))
    }

    fn give_back(&self, connection: Connection) {
        if connection.endpoint != self.preferred_endpoint() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_CONNECTIONS {
            idle.push(connection);
        }
    }

    pub(crate) fn preferred_endpoint(&self) -> Endpoint {
        let at = self.preferred.load(Ordering::Relaxed) % self.endpoints.len().max(1);
        self.endpoints[at].clone()
    }

    /// Moves on to the next endpoint, dropping the idle connections to the last.
    pub(crate) fn rotate(&self) {
        if self.endpoints.len() > 1 {
            self.preferred.fetch_add(1, Ordering::Relaxed);
        }
        self.idle.lock().clear();
    }

    /// Whether `endpoint` answers a status request within the request timeout, on a
    /// connection of its own.
    pub(crate) fn answers(&self, endpoint: &Endpoint) -> bool {
        Connection::open(endpoint, &self.dialer)
            .and_then(|mut connection| {
                let token = self.token.read().clone();
                connection.post(
                    "/v3/maintenance/status",
                    token.as_deref(),
                    b"{}",
                    Instant::now() + self.timeout,
                )
            })
            .is_ok_and(|response| response.status == 200)
    }

    /// A new connection for a streamed call (a watch), and its answer's status.
    pub(crate) fn open_stream(&self, path: &str, body: &Json) -> Result<Connection, LockError> {
        let token = self.token.read().clone();
        let bytes = body.as_bytes();
        let mut last = None;
        for _ in 0..self.endpoints.len() {
            let endpoint = self.preferred_endpoint();
            match Connection::open(&endpoint, &self.dialer).and_then(|mut connection| {
                let status = connection.post_stream(path, token.as_deref(), bytes, self.timeout)?;
                if status == 200 {
                    Ok(connection)
                } else {
                    Err(io::Error::other(format!("HTTP status {status}")))
                }
            }) {
                Ok(connection) => return Ok(connection),
                Err(error) => {
                    last = Some(error);
                    self.rotate();
                }
            }
        }
        Err(LockError::unavailable(
            format!("no etcd endpoint of {} opened a watch", self.describe()),
            last.unwrap_or_else(|| io::Error::other("no endpoint")),
        ))
    }
}

fn is_stale(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

/// The answer's JSON, or the failure its gRPC status says.
pub(crate) fn decode(status: u16, body: &[u8], endpoint: &Endpoint) -> Result<Value, Fail> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        Fail::Lock(LockError::protocol(format!(
            "etcd at {} answered HTTP {status} with no JSON: {error}",
            endpoint.authority()
        )))
    })?;
    if status == 200 && value.get("error").is_none() {
        return Ok(value);
    }
    Err(failure(&value, endpoint))
}

/// What a gRPC error status means here.
pub(crate) fn failure(value: &Value, endpoint: &Endpoint) -> Fail {
    let code = value["code"].as_i64().unwrap_or(-1);
    let message = value["message"]
        .as_str()
        .or_else(|| value["error"].as_str())
        .unwrap_or("no message")
        .to_owned();
    let at = endpoint.authority();
    if message.contains("requested lease not found") {
        return Fail::LeaseNotFound;
    }
    if message.contains("compacted") {
        return Fail::Compacted;
    }
    if message.contains("user name is empty") {
        // etcd has authentication on, and the backend gave no user.
        return Fail::Lock(LockError::config(format!(
            "etcd at {at} asks for credentials ({message}): give them with \
             EtcdBackend::builder(..).user(name, password), or in an \
             etcd://user:password@host URL"
        )));
    }
    match code {
        // Unauthenticated, or a token that expired / permission denied.
        16 => Fail::Lock(LockError::config(format!("etcd at {at}: {message}"))),
        7 if message.contains("token") => {
            Fail::Lock(LockError::config(format!("etcd at {at}: {message}")))
        }
        // Unavailable, deadline exceeded, aborted, or the server's own time-outs and leader
        // changes: the step may or may not have been applied.
        14 | 4 | 10 | 2 => Fail::Lock(LockError::unavailable(
            format!("etcd at {at}: {message}"),
            io::Error::other(message),
        )),
        _ => Fail::Lock(LockError::protocol(format!("etcd at {at}: {message}"))),
    }
}

/// The first pause before a request a member refused between leaders is sent again, and the
/// longest (it doubles from one to the other): an election takes etcd's election timeout
/// (1 s by default) and a round trip or two.
const BETWEEN_LEADERS_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
const BETWEEN_LEADERS_LAST_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether `answer` is a member's refusal while it has no leader or its leader changed
/// ("etcdserver: leader changed", "etcdserver: no leader", a request that timed out waiting
/// for one): a request that is safe to send again (whether or not this one ran) may be.
fn between_leaders(answer: &Result<Value, Fail>) -> bool {
    match answer {
        Err(Fail::Lock(error)) if error.is_unavailable() => {
            let text = error.to_string();
            text.contains("etcdserver: leader changed")
                || text.contains("etcdserver: no leader")
                || text.contains("etcdserver: request timed out")
        }
        _ => false,
    }
}

/// `": timed out after <timeout>"` if `error` is a read or write that ran out of time (which
/// the OS reports as "would block" on a socket with a timeout), else nothing.
fn timed_out(error: &io::Error, timeout: std::time::Duration) -> String {
    if is_time_out(error) {
        format!(": timed out after {timeout:?}")
    } else {
        String::new()
    }
}

/// What went wrong, in words: "timed out after ...", or the system's own ("connection
/// refused").
fn cause(error: &io::Error, timeout: std::time::Duration) -> String {
    if is_time_out(error) {
        format!("timed out after {timeout:?}")
    } else {
        error.to_string()
    }
}

fn is_time_out(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}
