//! Opening connections: URL parsing, TCP options, TLS, timeouts, and the r2d2 manager that
//! keeps broken connections out of the pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Client, Connection, ConnectionInfo, ConnectionLike, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, RedisError, RedisResult, Value,
};

use dlock_core::LockError;

use crate::config::{SentinelSettings, Settings};
use crate::error::{breaks_connection, to_lock_error};
use crate::tidying::Tidying;

/// Where a pool's connections go, for messages, with their timeouts and the count of
/// connection failures that tells old connections from trusted ones. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// "redis server" or "redis cluster".
    what: &'static str,
    /// `host:port` (never the credentials), for error messages.
    pub(crate) server: Arc<str>,
    /// The ACL user from the URL, for error messages.
    pub(crate) user: Option<Arc<str>>,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// What every connection to the server shares.
    shared: Arc<Shared>,
}

/// The state of an [`Endpoint`] that all its clones and connections share.
#[derive(Default)]
struct Shared {
    /// Bumped each time a connection breaks; see [`PooledConnection::epoch`].
    epoch: AtomicU64,
    /// No connection broke, nor failed to open, since the last one that opened.
    reachable: AtomicBool,
    /// Commands for the next step any connection to the server sends.
    tidying: Tidying,
}

impl Endpoint {
    pub(crate) fn new(
        what: &'static str,
        server: Arc<str>,
        user: Option<Arc<str>>,
        settings: &Settings,
    ) -> Self {
        Endpoint {
            what,
            server,
            user,
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            shared: Arc::new(Shared {
                reachable: AtomicBool::new(true),
                ..Shared::default()
            }),
        }
    }

    /// Describes the server (and user) for error messages.
    pub(crate) fn describe(&self) -> String {
        match &self.user {
            Some(user) => format!("{} {} (user {user:?})", self.what, self.server),
            None => format!("{} {}", self.what, self.server),
        }
    }

    /// Marks every connection opened so far as suspect: one broke, and when a server restarts
    /// or drops its clients all of them have. They are replaced at their next checkout rather
    /// than failing one call each.
    pub(crate) fn connection_broke(&self) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        self.shared.reachable.store(false, Ordering::Release);
    }

    /// Whether the server is taken to be reachable: no connection broke, nor failed to open,
    /// since the last one that opened. A caller waiting for a pooled connection to an
    /// unreachable server waits no longer than its own time budget for the server.
    pub(crate) fn is_reachable(&self) -> bool {
        self.shared.reachable.load(Ordering::Acquire)
    }

    pub(crate) fn current_epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Commands for the next step any connection to the server sends.
    pub(crate) fn tidying(&self) -> &Tidying {
        &self.shared.tidying
    }
}

/// A pool's connection manager: where it connects (see [`Endpoint`]).
pub(crate) trait Connect: r2d2::ManageConnection<Error = RedisError> + Clone {
    fn endpoint(&self) -> &Endpoint;
}

/// A pooled connection that can be found broken, and that remembers when it was opened.
pub(crate) trait Pooled {
    /// The endpoint's epoch when it was opened: if it has moved since, another connection
    /// broke and this one is not trusted.
    fn epoch(&self) -> u64;
    /// Whether an error left it unusable (r2d2 then discards it).
    fn broken(&mut self) -> &mut bool;

    /// Bounds what the step now using the connection may still wait for it: until `deadline`
    /// (`None`: the response timeout per reply, as before any step).
    fn set_step_deadline(&mut self, deadline: Option<Instant>) {
        let _ = deadline;
    }

    /// Records the outcome of a command: a connection-level error breaks it.
    fn note<T>(&mut self, result: &Result<T, RedisError>) {
        if let Err(error) = result {
            if breaks_connection(error) {
                *self.broken() = true;
            }
        }
    }
}

/// Opens connections to one server with the configured options. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connector {
    target: Target,
    pub(crate) endpoint: Endpoint,
}

/// What a connector connects to.
#[derive(Clone)]
enum Target {
    /// One server.
    Server(Box<Client>),
    /// Whichever server the sentinels name as the master when a connection is opened.
    Sentinel(Arc<Mutex<SentinelClient>>),
}

impl Connector {
    /// A connector for command connections from `settings`.
    pub(crate) fn commands(settings: &Settings) -> Result<Self, LockError> {
        let tcp = TcpSettings::default().set_nodelay(settings.tcp_nodelay);
        if let Some(sentinel) = &settings.sentinel {
            return Self::sentinel(settings, sentinel, RedisConnectionInfo::default(), tcp);
        }
        let info = parse_url(&settings.url)?;
        Self::new(settings, info.set_tcp_settings(tcp))
    }

    /// A connector for command connections to the server `info` names: a cluster's node.
    pub(crate) fn commands_to(
        settings: &Settings,
        info: ConnectionInfo,
    ) -> Result<Self, LockError> {
        let tcp = TcpSettings::default().set_nodelay(settings.tcp_nodelay);
        Self::new(settings, info.set_tcp_settings(tcp))
    }

    /// A connector for the pub/sub connection: RESP2 (release messages arrive as plain
    /// replies), `TCP_NODELAY` (subscriptions are confirmed to waiting threads), and TCP
    /// keepalive, because this connection reads with no timeout and must still notice a
    /// server that vanished without closing it.
    pub(crate) fn pubsub(settings: &Settings) -> Result<Self, LockError> {
        if let Some(sentinel) = &settings.sentinel {
            let redis = RedisConnectionInfo::default().set_protocol(ProtocolVersion::RESP2);
            return Self::sentinel(settings, sentinel, redis, pubsub_tcp());
        }
        Self::pubsub_to(settings, parse_url(&settings.url)?)
    }

    /// A pub/sub connector (see [`pubsub`](Self::pubsub)) to the server `info` names: a
    /// cluster's node.
    pub(crate) fn pubsub_to(settings: &Settings, info: ConnectionInfo) -> Result<Self, LockError> {
        let redis = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP2);
        let info = info
            .set_redis_settings(redis)
            .set_tcp_settings(pubsub_tcp());
        Self::new(settings, info)
    }

    /// A connector to the master the sentinels of `sentinel` name, with `redis` and `tcp`
    /// settings for the master's connections.
    fn sentinel(
        settings: &Settings,
        sentinel: &SentinelSettings,
        redis: RedisConnectionInfo,
        tcp: TcpSettings,
    ) -> Result<Self, LockError> {
        let sentinels = sentinel
            .sentinels
            .iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        let mut redis = redis.set_db(sentinel.db);
        if let Some(username) = &sentinel.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &sentinel.password {
            redis = redis.set_password(password);
        }
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(redis)
            .set_tcp_settings(tcp);
        let server: Arc<str> = format!(
            "master {:?} of sentinels {}",
            sentinel.master,
            sentinels
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into();
        let client = SentinelClient::build(
            sentinels,
            sentinel.master.clone(),
            Some(node),
            SentinelServerType::Master,
        )
        .map_err(|error| to_lock_error(error, "configuring the Sentinel client", &server))?;
        let user = sentinel.username.as_deref().map(Arc::from);
        Ok(Connector {
            target: Target::Sentinel(Arc::new(Mutex::new(client))),
            endpoint: Endpoint::new("redis server", server, user, settings),
        })
    }

    fn new(settings: &Settings, info: ConnectionInfo) -> Result<Self, LockError> {
        let server: Arc<str> = info.addr().to_string().into();
        let user = info.redis_settings().username().map(Arc::from);
        let client = build_client(settings, info)
            .map_err(|error| to_lock_error(error, "configuring the client", &server))?;
        Ok(Connector {
            target: Target::Server(Box::new(client)),
            endpoint: Endpoint::new("redis server", server, user, settings),
        })
    }

    /// Opens a connection whose connect, reads and writes are all bounded.
    pub(crate) fn open(&self) -> Result<Connection, RedisError> {
        let client = match &self.target {
            Target::Server(client) => (**client).clone(),
            // Asks the sentinels for the master now, and checks that it is one.
            Target::Sentinel(sentinel) => sentinel.lock().get_client()?,
        };
        let con = client.get_connection_with_timeout(self.endpoint.connect_timeout)?;
        con.set_read_timeout(Some(self.endpoint.response_timeout))?;
        con.set_write_timeout(Some(self.endpoint.response_timeout))?;
        Ok(con)
    }
}

impl Connect for Connector {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// How much later than asked a read may give up, at most, when the socket's timeout is kept
/// instead of set again. The kernel counts socket timeouts in scheduler ticks (1–10 ms), so a
/// timeout set to the microsecond was never kept to the microsecond.
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(2);

/// A pooled command connection.
///
/// It may owe replies: a command sent with [`send_unanswered`](PooledConnection::send_unanswered)
/// is not waited for; its reply is read and dropped right after the connection's next command
/// has been sent, so it costs that command no round trip. A command
/// [`deferred`](PooledConnection::defer) is not even sent yet: it goes in the same write as the
/// next command of any connection to the server.
pub(crate) struct PooledConnection {
    pub(crate) con: Connection,
    /// The connector's epoch when this connection was opened: if it has moved since, another
    /// connection broke and this one is not trusted.
    pub(crate) epoch: u64,
    /// Set after an error that leaves the connection unusable; r2d2 then discards it.
    pub(crate) broken: bool,
    /// Replies owed for commands sent without waiting.
    unread: usize,
    /// Where a step's commands are packed before one write (kept to reuse its memory).
    out: Vec<u8>,
    /// The server's commands to write ahead of the next step, their replies to be skipped.
    tidying: Tidying,
    /// The read timeout the socket has now (changing it is a system call).
    read_timeout: Duration,
    /// The read timeout of commands sent through [`ConnectionLike`]: the response timeout.
    response_timeout: Duration,
    /// When the step using the connection must be over (its response timeout counted from
    /// when it started, the wait for the connection included).
    step_deadline: Option<Instant>,
}

impl Pooled for PooledConnection {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn broken(&mut self) -> &mut bool {
        &mut self.broken
    }

    fn set_step_deadline(&mut self, deadline: Option<Instant>) {
        self.step_deadline = deadline;
    }
}

impl PooledConnection {
    /// When a reply must have come, at most `timeout` from now and never after the step's
    /// deadline.
    pub(crate) fn deadline_within(&self, timeout: Duration) -> Instant {
        let own = Instant::now() + timeout;
        self.step_deadline.map_or(own, |step| step.min(own))
    }

    /// What is left of `timeout` within the step's deadline (1 ms at least: a read with no time
    /// left still gets one try).
    fn left_within(&self, timeout: Duration) -> Duration {
        self.deadline_within(timeout)
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Sends `cmd` without waiting for its reply (see the type's docs). For commands whose
    /// outcome nobody needs: if the send fails, the connection is marked broken and nothing
    /// else happens.
    pub(crate) fn send_unanswered(&mut self, cmd: &redis::Cmd) {
        match self.con.send_packed_command(&cmd.get_packed_command()) {
            Ok(()) => self.unread += 1,
            Err(error) => {
                tracing::debug!(%error, "sending a command without waiting failed");
                self.broken = true;
            }
        }
    }

    /// Keeps the command of `words` to be written in front of the next command any connection
    /// to the server sends, its reply skipped: for tidying (a release's latch) that need not
    /// cost a write of its own. If that write fails, the command is never sent: use it only for
    /// what also ends by itself (a key with an expiry).
    pub(crate) fn defer(&mut self, words: &[&[u8]]) {
        self.tidying.push(words);
    }

    /// Writes packed commands whose replies are read later with
    /// [`read_replies`](Self::read_replies).
    pub(crate) fn send_packed(&mut self, packed: &[u8]) -> RedisResult<()> {
        self.send_encoded(|out| out.extend_from_slice(packed))
    }

    /// As [`send_packed`](Self::send_packed), with `encode` appending the packed commands to
    /// the connection's own buffer (after the deferred ones): a step's commands are encoded
    /// once, into memory the connection keeps, and written in one system call.
    pub(crate) fn send_encoded(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> RedisResult<()> {
        self.out.clear();
        let deferred = self.tidying.take_into(&mut self.out);
        encode(&mut self.out);
        let written = self.con.send_packed_command(&self.out);
        self.unread += deferred;
        written.inspect_err(|_| self.broken = true)
    }

    /// Reads `count` replies of commands written with [`send_packed`](Self::send_packed)
    /// (after the replies owed), waiting at most until `deadline`. A time-out leaves the
    /// connection broken.
    pub(crate) fn read_replies(
        &mut self,
        count: usize,
        deadline: Instant,
    ) -> RedisResult<Vec<Value>> {
        let result = (|| {
            let left = || {
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
            };
            while self.unread > 0 {
                self.wait_at_most(left())?;
                self.skip_one()?;
            }
            let mut replies = Vec::with_capacity(count);
            while replies.len() < count {
                self.wait_at_most(left())?;
                replies.push(self.next_reply()?);
            }
            Ok(replies)
        })();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Makes the socket's next reads give up after `left`, or at most a little later
    /// ([`READ_TIMEOUT_SLACK`]): a timeout that is already close enough is kept, so that a step
    /// whose deadline is the usual response timeout makes no system call for it, and a read
    /// with another deadline sets its own instead of putting the old one back after it.
    fn wait_at_most(&mut self, left: Duration) -> RedisResult<()> {
        let slack = (left / 16).min(READ_TIMEOUT_SLACK);
        if self.read_timeout < left || self.read_timeout > left + slack {
            self.con.set_read_timeout(Some(left))?;
            self.read_timeout = left;
        }
        Ok(())
    }

    /// Reads and drops one owed reply.
    fn skip_one(&mut self) -> RedisResult<()> {
        if let Value::ServerError(error) = self.con.recv_response()? {
            tracing::debug!(%error, "a command sent without waiting was refused");
        }
        self.unread -= 1;
        Ok(())
    }

    /// Reads and drops the replies owed, after the next command was sent.
    fn skip_unread(&mut self) -> RedisResult<()> {
        while self.unread > 0 {
            if let Value::ServerError(error) = self.con.recv_response()? {
                // A refused clean-up (an ACL without DEL on the key, say) leaves the key to
                // expire on its own.
                tracing::debug!(%error, "a command sent without waiting was refused");
            }
            self.unread -= 1;
        }
        Ok(())
    }

    /// The next reply that is not a RESP3 push.
    fn next_reply(&mut self) -> RedisResult<Value> {
        loop {
            match self.con.recv_response()? {
                Value::Push { .. } => continue,
                value => return Ok(value),
            }
        }
    }
}

impl ConnectionLike for PooledConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.wait_at_most(self.left_within(self.response_timeout))?;
        if self.unread == 0 && !self.tidying.waiting() {
            return self.con.req_packed_command(cmd);
        }
        self.send_packed(cmd)?;
        self.skip_unread()?;
        self.next_reply()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.wait_at_most(self.left_within(self.response_timeout))?;
        if self.unread == 0 && !self.tidying.waiting() {
            return self.con.req_packed_commands(cmd, offset, count);
        }
        self.send_packed(cmd)?;
        self.skip_unread()?;
        let mut replies = Vec::with_capacity(count);
        for index in 0..offset + count {
            let reply = self.next_reply()?;
            if index >= offset {
                replies.push(reply);
            }
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.wait_at_most(self.response_timeout).is_ok()
            && self.skip_unread().is_ok()
            && self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

impl r2d2::ManageConnection for Connector {
    type Connection = PooledConnection;
    type Error = RedisError;

    fn connect(&self) -> Result<PooledConnection, RedisError> {
        let epoch = self.endpoint.current_epoch();
        let con = self.open();
        self.endpoint
            .shared
            .reachable
            .store(con.is_ok(), Ordering::Release);
        Ok(PooledConnection {
            con: con?,
            epoch,
            broken: false,
            unread: 0,
            out: Vec::new(),
            tidying: self.endpoint.tidying().clone(),
            read_timeout: self.endpoint.response_timeout,
            response_timeout: self.endpoint.response_timeout,
            step_deadline: None,
        })
    }

    fn is_valid(&self, conn: &mut PooledConnection) -> Result<(), RedisError> {
        // Only used if checkout testing is turned on (it is off: it would cost a round trip).
        let result = redis::cmd("PING").query::<String>(conn);
        conn.note(&result);
        result.map(drop)
    }

    fn has_broken(&self, conn: &mut PooledConnection) -> bool {
        conn.broken || !conn.con.is_open()
    }
}

/// A pub/sub connection's TCP options: `TCP_NODELAY` and keepalive (see
/// [`Connector::pubsub`]).
fn pubsub_tcp() -> TcpSettings {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
}

fn parse_url(url: &str) -> Result<ConnectionInfo, LockError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("redis" | "rediss" | "redis+unix" | "unix")) {
        return Err(LockError::config(format!(
            "unsupported Redis URL {:?}: expected redis://[user:password@]host[:port][/db] or \
             rediss://... for TLS",
            redact_url(url)
        )));
    }
    #[cfg(not(feature = "tls"))]
    if scheme == Some("rediss") {
        return Err(LockError::config(
            "rediss:// URLs need lock-redis's `tls` feature, which this build leaves out",
        ));
    }
    url.into_connection_info()
        .map_err(|error| LockError::Config {
            message: format!("invalid Redis URL {:?}: {error}", redact_url(url)),
            source: Some(Box::new(error)),
        })
}

#[cfg(feature = "tls")]
fn build_client(settings: &Settings, info: ConnectionInfo) -> Result<Client, RedisError> {
    if settings.tls_root_certificate.is_none() && settings.tls_client_certificate.is_none() {
        return Client::open(info);
    }
    let certificates = redis::TlsCertificates {
        client_tls: settings.tls_client_certificate.as_ref().map(|(cert, key)| {
            redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }
        }),
        root_cert: settings.tls_root_certificate.clone(),
    };
    Client::build_with_tls(info, certificates)
}

#[cfg(not(feature = "tls"))]
fn build_client(_settings: &Settings, info: ConnectionInfo) -> Result<Client, RedisError> {
    Client::open(info)
}

/// `url` with any password replaced by `***`, for messages and `Debug`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://u:p@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:p@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
    }
}
