//! The Redis server as the harness of the shared suites ([`ServerEnv`]): what the server cases,
//! the lease model and the differential test need of it besides dlock's public API.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockError};

use super::{free_port, RedisEnv, RedisServer};
use crate::env::TestEnv;
use crate::lease_model::{Model, ServerModel};
use crate::server_cases::forged_grants::{Forger, Heard, MessageChannel};
use crate::server_cases::{Counter, Load, ServerEnv, Timeouts};
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
    const NAME: &'static str = "redis";

    fn start() -> Self {
        RedisServer::start()
    }

    fn conformance_env() -> impl TestEnv {
        RedisEnv::start()
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

    fn backend_through(&self, proxy: &TcpProxy, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
        let mut builder = RedisBackend::builder(&proxy.url());
        if let Some(answer) = timeouts.answer {
            builder = builder.response_timeout(answer);
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
        format!("redis://127.0.0.1:{}/", free_port())
    }

    fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError> {
        RedisBackend::builder(url)
            .connect_timeout(connect_timeout)
            .build()
            .map(drop)
    }

    const BAD_URLS: &'static [&'static str] = &[
        "http://127.0.0.1:6379",
        "not a url",
        "redis://127.0.0.1:notaport/",
        "redis://user:hunter2@127.0.0.1:notaport/",
    ];

    fn bad_settings() -> Vec<Result<(), LockError>> {
        let base = "redis://127.0.0.1:6379";
        vec![
            RedisBackend::builder(base).pool_size(0).build().map(drop),
            RedisBackend::builder(base)
                .response_timeout(Duration::ZERO)
                .build()
                .map(drop),
        ]
    }

    const TIMEOUT_WORDS: &'static str = "timeout";

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

    fn release_records(&self) -> usize {
        keys(&mut self.admin(), "redisson_unlock_latch:*").len()
    }

    // A reentrant release that found nothing latches nothing.
    const RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING: usize = 0;

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

    const LOAD: Load = Load {
        processes: 8,
        threads: 8,
        increments: 25,
        multi_lock_rounds: 1000,
    };

    /// Every script of the library in the server's cache.
    fn warm(&self) {
        let mut admin = self.admin();
        for (step, source) in dlocks::redis::lua_steps() {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query::<String>(&mut admin)
                .unwrap_or_else(|error| panic!("{step} does not load: {error}"));
        }
    }

    fn lease_model() -> ServerModel {
        let ms = Duration::from_millis;
        ServerModel {
            model: Model {
                watchdog: ms(600),
                short_lease: ms(200),
                long_lease: ms(3000),
                wait: ms(300),
                advances: vec![ms(0), ms(0), ms(50), ms(250), ms(700)],
                delays: vec![ms(20), ms(150), ms(700)],
                steps: 12,
                parallel: 4,
                // A loaded machine may keep the watchdog off the CPU for a while.
                loss_slack: Duration::from_secs(1),
                hold_back: &["redisson_unlock_latch", "EVALSHA", ""],
            },
            network_sequences: 100,
            network: Some(Timeouts {
                answer: Some(ms(250)),
                ..Timeouts::default()
            }),
            differential: Timeouts {
                answer: Some(ms(250)),
                ..Timeouts::default()
            },
            differential_short_lease: ms(200),
        }
    }
}

impl MessageChannel for RedisServer {
    fn forger(&self) -> Box<dyn Forger> {
        Box::new(RedisForger::start(self))
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

struct RedisForger {
    heard: Heard,
    /// An ACL user that may read every key and publish, and nothing else.
    reader: redis::Connection,
}

impl RedisForger {
    /// Listens to every lock channel of `server` (as `PSUBSCRIBE` lets anyone with the right
    /// to subscribe), and reads it as a monitoring user may.
    fn start(server: &RedisServer) -> Self {
        let url = RedisServer::url(server);
        let client = redis::Client::open(url.as_str()).expect("client");
        let () = redis::cmd("ACL")
            .arg(&[
                "SETUSER",
                "lock-monitor",
                "on",
                ">monitor-secret",
                "~*",
                "&*",
            ])
            .arg(&["-@all", "+@read", "+publish"])
            .query(&mut client.get_connection().expect("admin"))
            .expect("ACL SETUSER");
        let reader = redis::Client::open(server.url_for("lock-monitor", "monitor-secret"))
            .and_then(|reader| reader.get_connection())
            .expect("the monitoring user connects");
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
        RedisForger { heard, reader }
    }
}

impl Drop for RedisForger {
    fn drop(&mut self) {
        self.heard.stop();
    }
}

impl Forger for RedisForger {
    fn grants_heard(&mut self) -> Vec<(String, u64)> {
        self.heard.take()
    }

    fn listen_to_waiters_of(&mut self, _name: &str) {
        // Subscribed to every channel from the start.
    }

    fn forge(&mut self, to: &str, attempt: u64) {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(to)
            .arg(format!("grant:{attempt}"))
            .query(&mut self.reader)
            .expect("PUBLISH");
    }

    fn read_offers(&mut self, name: &str) -> Vec<(String, u64)> {
        // Waiter id → `<grant lease ms>:<attempt>:<hold id>` (docs/redis.md).
        let offers: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("dlock_lock_grant:{{{name}}}"))
            .query(&mut self.reader)
            .expect("HGETALL as the monitoring user");
        offers
            .into_iter()
            .filter_map(|(waiter, offer)| {
                let attempt = offer.split(':').nth(1)?.parse().ok()?;
                Some((
                    format!("redisson_lock__channel:{{{name}}}:{waiter}"),
                    attempt,
                ))
            })
            .collect()
    }
}
