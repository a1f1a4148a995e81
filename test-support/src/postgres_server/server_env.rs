//! The PostgreSQL server as the harness of the shared suites ([`ServerEnv`]): what the server
//! cases, the lease model and the differential test need of it besides dlock's public API.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::postgres::PostgresBackend;
use dlocks::{LockClient, LockError};

use super::{free_port, PostgresEnv, PostgresServer, RowsHeld};
use crate::differential::ProxyTarget;
use crate::env::TestEnv;
use crate::lease_model::{Model, ServerModel};
use crate::server_cases::forged_grants::{Forger, Heard, MessageChannel};
use crate::server_cases::{Counter, Load, ServerEnv, Timeouts};
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
    const NAME: &'static str = "postgres";

    fn start() -> Self {
        PostgresServer::start()
    }

    fn conformance_env() -> impl TestEnv {
        PostgresEnv::start()
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

    fn backend_through(&self, proxy: &TcpProxy, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
        self.backend(); // the schema
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
        let mut builder = PostgresBackend::builder(&url);
        if let Some(answer) = timeouts.answer {
            builder = builder.statement_timeout(answer);
        }
        if let Some(connect) = timeouts.connect {
            builder = builder.connect_timeout(connect);
        }
        if let Some(checkout) = timeouts.checkout {
            builder = builder.checkout_timeout(checkout);
        }
        Arc::new(builder.build().expect("connect through the proxy"))
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

    const BAD_URLS: &'static [&'static str] = &[
        "http://127.0.0.1:5432/db",
        "postgres://127.0.0.1:notaport/db",
        "postgres:///db",
        "postgres://user:hunter2@127.0.0.1:notaport/db",
    ];

    fn bad_settings() -> Vec<Result<(), LockError>> {
        let base = "postgres://postgres@127.0.0.1:5432/postgres";
        vec![
            PostgresBackend::builder(base)
                .pool_size(0)
                .build()
                .map(drop),
            PostgresBackend::builder(base)
                .statement_timeout(Duration::ZERO)
                .build()
                .map(drop),
            PostgresBackend::builder(base)
                .schema("two words")
                .build()
                .map(drop),
            PostgresBackend::builder(base).schema("").build().map(drop),
        ]
    }

    const TIMEOUT_WORDS: &'static str = "no answer within";

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

    fn release_records(&self) -> usize {
        count(self, "dlock.latches")
    }

    // A reentrant release that found no live hold latches its "not held" (ten minutes), so that
    // one sent again answers the same.
    const RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING: usize = 1;

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

    const LOAD: Load = Load {
        processes: 4,
        threads: 4,
        increments: 20,
        multi_lock_rounds: 200,
    };

    fn lease_model() -> ServerModel {
        let ms = Duration::from_millis;
        ServerModel {
            model: Model {
                watchdog: ms(900),
                short_lease: ms(300),
                long_lease: ms(3000),
                wait: ms(400),
                advances: vec![ms(0), ms(0), ms(50), ms(300), ms(900)],
                delays: vec![ms(20), ms(200), ms(900)],
                steps: 12,
                parallel: 4,
                loss_slack: Duration::from_secs(1),
                hold_back: &[""],
            },
            network_sequences: 80,
            network: Some(Timeouts {
                answer: Some(ms(300)),
                connect: Some(Duration::from_secs(2)),
                checkout: Some(Duration::from_secs(1)),
            }),
            differential: Timeouts {
                answer: Some(ms(500)),
                connect: Some(Duration::from_secs(2)),
                checkout: Some(Duration::from_secs(1)),
            },
            differential_short_lease: ms(200),
        }
    }

    fn differential_target(&self, target: ProxyTarget) -> ProxyTarget {
        // A request held up past the backend's timeout reaches the server on a connection
        // the backend has closed: the server runs it, fails to send its rows, and rolls its
        // transaction back, or not, as the close and the commit fall.
        // Held requests meet at the sequences' rows: each does what it does before it locks
        // a row, then they go on one by one.
        let url = self.url();
        target
            .losing_held_requests()
            .delivering_through(move |held, deliver| {
                if held == 0 {
                    return deliver();
                }
                let mut rows = RowsHeld::hold_prefixed(&url, crate::differential::NAME_PREFIX);
                thread::scope(|scope| {
                    let delivered = scope.spawn(deliver);
                    rows.await_waiters(held, Duration::from_millis(10), Duration::from_millis(150));
                    rows.let_go();
                    delivered.join().expect("the delivery")
                })
            })
    }
}

impl MessageChannel for PostgresServer {
    fn forger(&self) -> Box<dyn Forger> {
        Box::new(PostgresForger::start(
            self,
            dlocks::postgres::DEFAULT_SCHEMA,
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

struct PostgresForger {
    heard: Heard,
    /// A role that may read every table of the schema, and nothing else (`NOTIFY` needs no
    /// privilege).
    reader: postgres::Client,
    schema: String,
    /// Channels for the listening thread to listen to, each with the sender it acknowledges
    /// on once it does.
    listen: mpsc::Sender<(String, mpsc::Sender<()>)>,
}

/// A grant's destination as the forger tells it: the channel and the waiter's key.
fn destination(channel: &str, key: &str) -> String {
    format!("{channel} {key}")
}

impl PostgresForger {
    /// Listens to the notifications of schema `schema` on `server` (as any role may), and
    /// reads the schema as a monitoring role may.
    fn start(server: &PostgresServer, schema: &str) -> Self {
        let url = PostgresServer::url(server);
        // The schema's tables exist once a backend has connected.
        drop(ServerEnv::backend_with(server, Timeouts::default()));
        server
            .admin()
            .batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE lock_monitor LOGIN PASSWORD 'monitor-secret'; \
                 EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
                 GRANT USAGE ON SCHEMA \"{schema}\" TO lock_monitor; \
                 GRANT SELECT ON ALL TABLES IN SCHEMA \"{schema}\" TO lock_monitor;"
            ))
            .expect("a read-only role");
        let reader = postgres::Client::connect(
            &server.url_for("lock_monitor", "monitor-secret"),
            postgres::NoTls,
        )
        .expect("the monitoring role connects");
        let mut listener = postgres::Client::connect(&url, postgres::NoTls).expect("listener");
        listener
            .batch_execute(&format!("LISTEN \"{schema}\""))
            .expect("LISTEN");
        let heard = Heard::default();
        let (listen, requests) = mpsc::channel::<(String, mpsc::Sender<()>)>();
        {
            let heard = heard.clone();
            thread::spawn(move || {
                while !heard.stopped() {
                    while let Ok((channel, done)) = requests.try_recv() {
                        listener
                            .batch_execute(&format!("LISTEN \"{channel}\""))
                            .expect("LISTEN");
                        let _ = done.send(());
                    }
                    let mut notifications = listener.notifications();
                    let mut waiting = notifications.timeout_iter(Duration::from_millis(50));
                    while let Ok(Some(notification)) =
                        postgres::fallible_iterator::FallibleIterator::next(&mut waiting)
                    {
                        let payload = notification.payload();
                        let grant = payload.strip_prefix('g').and_then(|rest| {
                            let (attempt, key) = rest.split_once(':')?;
                            Some((
                                destination(notification.channel(), key),
                                attempt.parse().ok()?,
                            ))
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
            reader,
            schema: schema.to_owned(),
            listen,
        }
    }
}

impl Drop for PostgresForger {
    fn drop(&mut self) {
        self.heard.stop();
    }
}

impl Forger for PostgresForger {
    fn grants_heard(&mut self) -> Vec<(String, u64)> {
        self.heard.take()
    }

    fn listen_to_waiters_of(&mut self, name: &str) {
        // A fair waiter is told on its client's channel, which its id (in `waiters`) names.
        for (to, _) in self.read_waiters(name) {
            let (channel, _) = to.split_once(' ').expect("a destination");
            let (done, acknowledged) = mpsc::channel();
            let channel = channel.to_owned();
            self.listen
                .send((channel, done))
                .expect("the listening thread");
            acknowledged
                .recv_timeout(Duration::from_secs(10))
                .expect("LISTEN acknowledged");
        }
    }

    fn forge(&mut self, to: &str, attempt: u64) {
        let (channel, key) = to.split_once(' ').expect("a destination");
        self.reader
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&channel, &format!("g{attempt}:{key}")],
            )
            .expect("NOTIFY");
    }

    fn read_offers(&mut self, name: &str) -> Vec<(String, u64)> {
        self.read_waiters(name)
            .into_iter()
            .filter_map(|(to, attempt)| Some((to, attempt?)))
            .collect()
    }
}

impl PostgresForger {
    /// The waiters of fair lock `name`, read as the monitoring role: where each is told (its
    /// client's channel and its key: `_client_channel` and `_waiter_key` of docs/postgres.md,
    /// computed here as a reader may), and the attempt its grant offer names, if it made one.
    fn read_waiters(&mut self, name: &str) -> Vec<(String, Option<u64>)> {
        let query = format!(
            "SELECT 'dlock:' || left(encode(sha256(convert_to($2, 'UTF8') || '\\x00'::bytea \
             || convert_to(regexp_replace(owner, ':[^:]*$', ''), 'UTF8')), 'hex'), 40), \
             encode(sha256(convert_to(name, 'UTF8') || '\\x00'::bytea \
             || convert_to(owner, 'UTF8')), 'hex'), wait_id \
             FROM \"{}\".waiters WHERE name = $1",
            self.schema
        );
        self.reader
            .query(&query, &[&name, &self.schema])
            .expect("SELECT as the monitoring role")
            .iter()
            .map(|row| {
                let to = destination(row.get(0), row.get(1));
                let attempt = row.get::<_, Option<i64>>(2).map(i64::unsigned_abs);
                (to, attempt)
            })
            .collect()
    }
}
