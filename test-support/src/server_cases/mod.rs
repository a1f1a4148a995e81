//! Behaviours of a lock server that the backends keeping their locks on one (Redis,
//! PostgreSQL) share: written once against [`ServerEnv`], run on each backend by its own test
//! functions, which pass in a backend-specific arm only where the behaviour really differs.

pub mod faults;
pub mod forged_grants;
pub mod latch;
pub mod multi;
pub mod processes;
pub mod synchronizer_processes;

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::{LockClient, LockError};

use crate::tcp_proxy::TcpProxy;

/// A real server of one backend, started for one test, and what the shared cases need to see
/// of it besides dlock's public API.
pub trait ServerEnv: Sized {
    /// Starts a server of its own.
    fn start() -> Self;

    /// The port it listens on.
    fn port(&self) -> u16;

    /// The URL another process connects to it by.
    fn url(&self) -> String;

    /// A client on the server with bounded test timeouts.
    fn client(&self) -> LockClient;

    /// A backend on the server with bounded test timeouts, the ones `timeouts` names replaced.
    fn backend_with(&self, timeouts: Timeouts) -> Arc<dyn DistributedLock>;

    /// A URL of this backend naming a port on which nothing listens.
    fn url_with_nothing_listening() -> String;

    /// Makes a backend for `url` that gives up connecting after `connect_timeout`.
    fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError>;

    /// Kills the server (`kill -9`).
    fn kill(&mut self);

    /// Starts the killed server again, on the same port and data directory.
    fn restart(&mut self);

    /// Stops the server from answering (`SIGSTOP`).
    fn pause(&self);

    /// Lets a paused server answer again.
    fn resume(&self);

    /// A client on the server at `url`, made as another process makes one.
    fn connect(url: &str) -> LockClient;

    /// The backend on the server at `url` (for a client built with settings of its own).
    fn connect_backend(url: &str) -> Arc<dyn DistributedLock>;

    /// A client whose pool keeps `size` connections.
    fn client_with_pool(&self, size: u32) -> LockClient;

    /// A client on the server through `proxy`, whose requests the proxy can recognize by
    /// [`ServerEnv::RELEASE_REQUEST`], with a 2 s bound on each answer.
    fn client_through(&self, proxy: &TcpProxy) -> LockClient;

    /// Text that a release request carries on the wire (and no other request).
    const RELEASE_REQUEST: &'static str;

    /// How many release latches the server keeps.
    fn latches(&self) -> usize;

    /// How many locks the server keeps (latches aside).
    fn locks(&self) -> usize;

    /// Makes ready the counter that [`ServerEnv::counter`] reads and writes, before processes
    /// race to it.
    fn prepare_counter(&self) {}

    /// A plain connection (not through dlock) to a counter on the server at `url`: a read and
    /// a separate write, which only a lock keeps together.
    fn counter(url: &str) -> Box<dyn Counter>;
}

/// Timeouts of a backend in a test; `None` keeps the harness's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts {
    /// How long a request waits for its answer (Redis's response timeout, PostgreSQL's
    /// statement timeout).
    pub answer: Option<Duration>,
    /// How long connecting may take.
    pub connect: Option<Duration>,
    /// How long a call waits for a pooled connection.
    pub checkout: Option<Duration>,
}

/// A value on the server read and written with plain commands.
pub trait Counter {
    /// The value (0 before the first write).
    fn read(&mut self) -> i64;
    /// Sets the value.
    fn write(&mut self, value: i64);
    /// Adds `delta` to the value in one command (atomic on the server); answers the value after.
    fn add(&mut self, delta: i64) -> i64;
}

#[cfg(feature = "redis")]
mod redis_env {
    use std::sync::Arc;
    use std::time::Duration;

    use dlocks::backend::DistributedLock;
    use dlocks::redis::RedisBackend;
    use dlocks::{LockClient, LockError};

    use super::{Counter, ServerEnv, Timeouts};
    use crate::redis_server::{free_port, RedisServer};
    use crate::tcp_proxy::TcpProxy;

    /// Every key matching `pattern`, by `SCAN`.
    pub fn keys(admin: &mut redis::Connection, pattern: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query(admin)
                .expect("SCAN");
            found.extend(batch);
            if next == 0 {
                return found;
            }
            cursor = next;
        }
    }

    impl ServerEnv for RedisServer {
        fn start() -> Self {
            RedisServer::start()
        }

        fn port(&self) -> u16 {
            RedisServer::port(self)
        }

        fn url(&self) -> String {
            RedisServer::url(self)
        }

        fn client(&self) -> LockClient {
            LockClient::new(self.backend())
        }

        fn backend_with(&self, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
            let mut builder = self.backend_builder();
            if let Some(answer) = timeouts.answer {
                builder = builder.response_timeout(answer);
            }
            if let Some(connect) = timeouts.connect {
                builder = builder.connect_timeout(connect);
            }
            if let Some(checkout) = timeouts.checkout {
                builder = builder.checkout_timeout(checkout);
            }
            Arc::new(builder.build().expect("backend"))
        }

        fn url_with_nothing_listening() -> String {
            format!("redis://127.0.0.1:{}/", free_port())
        }

        fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError> {
            RedisBackend::builder(url)
                .connect_timeout(connect_timeout)
                .build()
                .map(drop)
        }

        fn kill(&mut self) {
            RedisServer::kill(self);
        }

        fn restart(&mut self) {
            RedisServer::restart(self);
        }

        fn pause(&self) {
            RedisServer::pause(self);
        }

        fn resume(&self) {
            RedisServer::resume(self);
        }

        fn connect(url: &str) -> LockClient {
            LockClient::new(RedisBackend::connect(url).expect("helper connects"))
        }

        fn connect_backend(url: &str) -> Arc<dyn DistributedLock> {
            Arc::new(RedisBackend::connect(url).expect("helper connects"))
        }

        fn client_with_pool(&self, size: u32) -> LockClient {
            let backend = RedisBackend::builder(&RedisServer::url(self))
                .pool_size(size)
                .build()
                .expect("backend");
            LockClient::new(backend)
        }

        fn client_through(&self, proxy: &TcpProxy) -> LockClient {
            let backend = RedisBackend::builder(&proxy.url())
                .response_timeout(Duration::from_secs(2))
                .build()
                .expect("backend through the proxy");
            LockClient::new(backend)
        }

        const RELEASE_REQUEST: &'static str = "redisson_unlock_latch";

        fn latches(&self) -> usize {
            keys(&mut self.admin(), "redisson_unlock_latch:*").len()
        }

        fn locks(&self) -> usize {
            keys(&mut self.admin(), "*")
                .iter()
                .filter(|key| !key.starts_with("redisson_unlock_latch:"))
                // A client's record is not a lock: it expires when the client stops.
                .filter(|key| !key.starts_with("dlock_client:"))
                .count()
        }

        fn counter(url: &str) -> Box<dyn Counter> {
            let client = redis::Client::open(url).expect("client");
            Box::new(RedisCounter(client.get_connection().expect("connection")))
        }
    }

    struct RedisCounter(redis::Connection);

    impl Counter for RedisCounter {
        fn read(&mut self) -> i64 {
            redis::cmd("GET")
                .arg("procs:counter")
                .query::<Option<i64>>(&mut self.0)
                .expect("GET")
                .unwrap_or(0)
        }

        fn write(&mut self, value: i64) {
            let () = redis::cmd("SET")
                .arg("procs:counter")
                .arg(value)
                .query(&mut self.0)
                .expect("SET");
        }

        fn add(&mut self, delta: i64) -> i64 {
            redis::cmd("INCRBY")
                .arg("procs:counter")
                .arg(delta)
                .query(&mut self.0)
                .expect("INCRBY")
        }
    }
}

#[cfg(feature = "redis")]
pub use redis_env::keys;

#[cfg(feature = "postgres")]
mod postgres_env {
    use std::sync::Arc;
    use std::time::Duration;

    use dlocks::backend::DistributedLock;
    use dlocks::postgres::PostgresBackend;
    use dlocks::{LockClient, LockError};

    use super::{Counter, ServerEnv, Timeouts};
    use crate::postgres_server::{free_port, PostgresServer};
    use crate::tcp_proxy::TcpProxy;

    /// `SELECT count(*) FROM <table>` on `server`.
    fn count(server: &PostgresServer, table: &str) -> usize {
        let rows: i64 = server
            .admin()
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .expect("count")
            .get(0);
        usize::try_from(rows).expect("a count")
    }

    impl ServerEnv for PostgresServer {
        fn start() -> Self {
            PostgresServer::start()
        }

        fn port(&self) -> u16 {
            PostgresServer::port(self)
        }

        fn url(&self) -> String {
            PostgresServer::url(self)
        }

        fn client(&self) -> LockClient {
            LockClient::new(self.backend())
        }

        fn backend_with(&self, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
            let mut builder = self.backend_builder();
            if let Some(answer) = timeouts.answer {
                builder = builder.statement_timeout(answer);
            }
            if let Some(connect) = timeouts.connect {
                builder = builder.connect_timeout(connect);
            }
            if let Some(checkout) = timeouts.checkout {
                builder = builder.checkout_timeout(checkout);
            }
            Arc::new(builder.build().expect("backend"))
        }

        fn url_with_nothing_listening() -> String {
            format!("postgres://postgres@127.0.0.1:{}/postgres", free_port())
        }

        fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError> {
            PostgresBackend::builder(url)
                .connect_timeout(connect_timeout)
                .build()
                .map(drop)
        }

        fn kill(&mut self) {
            PostgresServer::kill(self);
        }

        fn restart(&mut self) {
            PostgresServer::restart(self);
        }

        fn pause(&self) {
            PostgresServer::pause(self);
        }

        fn resume(&self) {
            PostgresServer::resume(self);
        }

        fn connect(url: &str) -> LockClient {
            LockClient::new(PostgresBackend::connect(url).expect("helper connects"))
        }

        fn connect_backend(url: &str) -> Arc<dyn DistributedLock> {
            Arc::new(PostgresBackend::connect(url).expect("helper connects"))
        }

        fn client_with_pool(&self, size: u32) -> LockClient {
            LockClient::new(
                self.backend_builder()
                    .pool_size(size)
                    .build()
                    .expect("backend"),
            )
        }

        fn client_through(&self, proxy: &TcpProxy) -> LockClient {
            self.backend(); // the schema
            let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
            // Unprepared statements carry their SQL, which the proxy recognizes.
            let backend = PostgresBackend::builder(&url)
                .prepared_statements(false)
                .pool_size(1)
                .statement_timeout(Duration::from_secs(2))
                .build()
                .expect("backend through the proxy");
            LockClient::new(backend)
        }

        // The release's statement (a client's record has a `gone AS (DELETE` of its own).
        const RELEASE_REQUEST: &'static str = "gone AS (DELETE FROM \"dlock\".locks";

        fn latches(&self) -> usize {
            count(self, "dlock.latches")
        }

        fn locks(&self) -> usize {
            count(self, "dlock.locks")
        }

        fn prepare_counter(&self) {
            self.backend(); // the schema, before the helpers race to it
            self.execute(
                "CREATE TABLE counter (value bigint NOT NULL); INSERT INTO counter VALUES (0)",
            );
        }

        fn counter(url: &str) -> Box<dyn Counter> {
            Box::new(PostgresCounter(
                postgres::Client::connect(url, postgres::NoTls).expect("connect"),
            ))
        }
    }

    struct PostgresCounter(postgres::Client);

    impl Counter for PostgresCounter {
        fn read(&mut self) -> i64 {
            self.0
                .query_one("SELECT value FROM counter", &[])
                .expect("read")
                .get(0)
        }

        fn write(&mut self, value: i64) {
            self.0
                .execute("UPDATE counter SET value = $1", &[&value])
                .expect("write");
        }

        fn add(&mut self, delta: i64) -> i64 {
            self.0
                .query_one(
                    "UPDATE counter SET value = value + $1 RETURNING value",
                    &[&delta],
                )
                .expect("add")
                .get(0)
        }
    }
}

/// The outsiders of [`forged_grants`]: one listening to every channel of a Redis server, one
/// listening to a PostgreSQL schema's notifications.
mod forgers {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::thread;
    use std::time::Duration;

    use super::forged_grants::Forger;

    /// The grants an outsider's listening thread heard, and its stop switch.
    #[derive(Clone, Default)]
    pub(super) struct Heard {
        grants: Arc<Mutex<Vec<(String, u64)>>>,
        stop: Arc<AtomicBool>,
    }

    impl Heard {
        fn push(&self, to: String, attempt: u64) {
            self.grants.lock().expect("heard").push((to, attempt));
        }

        fn take(&self) -> Vec<(String, u64)> {
            std::mem::take(&mut *self.grants.lock().expect("heard"))
        }

        fn stopped(&self) -> bool {
            self.stop.load(Ordering::SeqCst)
        }
    }

    impl Heard {
        /// Ends the listening thread (within its 50 ms read timeout).
        fn stop(&self) {
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    #[cfg(feature = "redis")]
    pub(super) struct RedisForger {
        pub(super) heard: Heard,
        pub(super) publisher: redis::Connection,
    }

    #[cfg(feature = "redis")]
    impl RedisForger {
        /// Listens to every lock channel of the server at `url` (as `PSUBSCRIBE` lets anyone
        /// with the right to subscribe).
        pub(super) fn start(url: &str) -> Self {
            let client = redis::Client::open(url).expect("client");
            let mut listener = client.get_connection().expect("listener");
            let heard = Heard::default();
            let (ready, subscribed) = std::sync::mpsc::channel();
            {
                let heard = heard.clone();
                thread::spawn(move || {
                    let mut pubsub = listener.as_pubsub();
                    pubsub
                        .psubscribe("redisson_lock__channel:*")
                        .expect("PSUBSCRIBE");
                    pubsub
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .expect("timeout");
                    let _ = ready.send(());
                    while !heard.stopped() {
                        let Ok(message) = pubsub.get_message() else {
                            continue;
                        };
                        let payload: String = message.get_payload().unwrap_or_default();
                        if let Some(attempt) = payload
                            .strip_prefix("grant:")
                            .and_then(|attempt| attempt.parse().ok())
                        {
                            heard.push(message.get_channel_name().to_owned(), attempt);
                        }
                    }
                });
            }
            subscribed
                .recv_timeout(Duration::from_secs(10))
                .expect("subscribed");
            RedisForger {
                heard,
                publisher: client.get_connection().expect("publisher"),
            }
        }
    }

    #[cfg(feature = "redis")]
    impl Drop for RedisForger {
        fn drop(&mut self) {
            self.heard.stop();
        }
    }

    #[cfg(feature = "redis")]
    impl Forger for RedisForger {
        fn grants_heard(&mut self) -> Vec<(String, u64)> {
            self.heard.take()
        }

        fn forge(&mut self, to: &str, attempt: u64) {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(to)
                .arg(format!("grant:{attempt}"))
                .query(&mut self.publisher)
                .expect("PUBLISH");
        }
    }

    #[cfg(feature = "postgres")]
    pub(super) struct PostgresForger {
        pub(super) heard: Heard,
        pub(super) notifier: postgres::Client,
        pub(super) channel: String,
    }

    #[cfg(feature = "postgres")]
    impl PostgresForger {
        /// Listens to the notifications of schema `channel` on the server at `url` (as any role
        /// may).
        pub(super) fn start(url: &str, channel: &str) -> Self {
            let mut listener = postgres::Client::connect(url, postgres::NoTls).expect("listener");
            listener
                .batch_execute(&format!("LISTEN \"{channel}\""))
                .expect("LISTEN");
            let heard = Heard::default();
            {
                let heard = heard.clone();
                thread::spawn(move || {
                    while !heard.stopped() {
                        let mut notifications = listener.notifications();
                        let mut waiting = notifications.timeout_iter(Duration::from_millis(50));
                        while let Ok(Some(notification)) =
                            postgres::fallible_iterator::FallibleIterator::next(&mut waiting)
                        {
                            let payload = notification.payload();
                            let grant = payload.strip_prefix('g').and_then(|rest| {
                                let (attempt, to) = rest.split_once(':')?;
                                Some((to.to_owned(), attempt.parse().ok()?))
                            });
                            if let Some((to, attempt)) = grant {
                                heard.push(to, attempt);
                            }
                        }
                    }
                });
            }
            PostgresForger {
                heard,
                notifier: postgres::Client::connect(url, postgres::NoTls).expect("notifier"),
                channel: channel.to_owned(),
            }
        }
    }

    #[cfg(feature = "postgres")]
    impl Drop for PostgresForger {
        fn drop(&mut self) {
            self.heard.stop();
        }
    }

    #[cfg(feature = "postgres")]
    impl Forger for PostgresForger {
        fn grants_heard(&mut self) -> Vec<(String, u64)> {
            self.heard.take()
        }

        fn forge(&mut self, to: &str, attempt: u64) {
            self.notifier
                .execute(
                    "SELECT pg_notify($1, $2)",
                    &[&self.channel, &format!("g{attempt}:{to}")],
                )
                .expect("NOTIFY");
        }
    }
}

#[cfg(feature = "redis")]
impl forged_grants::ForgeryEnv for crate::redis_server::RedisServer {
    fn forger(&self) -> Box<dyn forged_grants::Forger> {
        Box::new(forgers::RedisForger::start(
            &crate::redis_server::RedisServer::url(self),
        ))
    }

    fn queued(&self, name: &str) -> u64 {
        self.backend()
            .inspect(name)
            .expect("inspect")
            .queued_waiters
    }
}

#[cfg(feature = "postgres")]
impl forged_grants::ForgeryEnv for crate::postgres_server::PostgresServer {
    fn forger(&self) -> Box<dyn forged_grants::Forger> {
        Box::new(forgers::PostgresForger::start(
            &crate::postgres_server::PostgresServer::url(self),
            dlocks::postgres::DEFAULT_SCHEMA,
        ))
    }

    fn queued(&self, name: &str) -> u64 {
        self.backend()
            .inspect(name)
            .expect("inspect")
            .queued_waiters
    }
}
