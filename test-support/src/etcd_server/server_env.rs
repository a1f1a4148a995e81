//! One etcd member as the harness of the shared suites ([`ServerEnv`]): what the server cases,
//! the lease model and the differential test need of it besides dlock's public API.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlocks::backend::DistributedLock;
use dlocks::etcd::{EtcdBackend, EtcdBackendBuilder};
use dlocks::{LockClient, LockError};
use serde_json::{json, Value};

use super::{body_of, post, EtcdCluster, EtcdEnv};
use crate::differential::ProxyTarget;
use crate::env::TestEnv;
use crate::lease_model::{Model, ServerModel};
use crate::ports::free_port;
use crate::server_cases::{Counter, Load, ServerEnv, Timeouts};
use crate::tcp_proxy::TcpProxy;

/// The key the processes' counter is kept under.
const COUNTER: &[u8] = b"procs:counter";

/// `builder` with the timeouts `timeouts` names (etcd's backend has no pool to wait for: a
/// call waits for a place among the calls in flight within its request timeout).
fn with(builder: EtcdBackendBuilder, timeouts: Timeouts) -> EtcdBackendBuilder {
    let mut builder = builder;
    if let Some(answer) = timeouts.answer {
        builder = builder.request_timeout(answer);
    }
    if let Some(connect) = timeouts.connect {
        builder = builder.connect_timeout(connect);
    }
    builder
}

/// The JSON answer of `POST path` to the member on `port`, without dlock.
fn call(port: u16, path: &str, body: &Value) -> Value {
    let answer = post(std::net::Ipv4Addr::LOCALHOST, port, path, &body.to_string())
        .unwrap_or_else(|| panic!("etcd on port {port} did not answer {path}"));
    serde_json::from_str(&body_of(&answer)).expect("etcd answers JSON")
}

/// The keys in `[from, to)` on the member on `port` (keys only).
fn keys_between(port: u16, from: &[u8], to: &[u8]) -> Vec<Vec<u8>> {
    let answer = call(
        port,
        "/v3/kv/range",
        &json!({
            "key": STANDARD.encode(from),
            "range_end": STANDARD.encode(to),
            "keys_only": true,
        }),
    );
    answer["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| STANDARD.decode(kv["key"].as_str()?).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// What the request of a step writing on lock `name` carries: the gateway carries keys in
/// base64, and every key of the name starts with its prefix (`<name>/`), whose first whole
/// groups of three bytes encode the same in every key; and a step reads before it writes, its
/// own request being the transaction that compares (a read compares nothing).
fn step_request(backend: &EtcdBackend, name: &str) -> Vec<String> {
    let prefix = backend.key_prefix(name);
    let whole = prefix.len() - prefix.len() % 3;
    vec![
        STANDARD.encode(&prefix.as_bytes()[..whole]),
        r#""compare":[{"#.to_owned(),
    ]
}

impl ServerEnv for EtcdCluster {
    const NAME: &'static str = "etcd";

    fn start() -> Self {
        EtcdCluster::single()
    }

    fn conformance_env() -> impl TestEnv {
        EtcdEnv::single()
    }

    fn port(&self) -> u16 {
        self.members()[0].client_port
    }

    fn url(&self) -> String {
        self.members()[0].url()
    }

    fn client(&self) -> LockClient {
        LockClient::new(self.backend())
    }

    fn backend_with(&self, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
        Arc::new(
            with(self.backend_builder(), timeouts)
                .build()
                .expect("backend"),
        )
    }

    fn backend_through(&self, proxy: &TcpProxy, timeouts: Timeouts) -> Arc<dyn DistributedLock> {
        let builder = EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
            .connect_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(2));
        Arc::new(
            with(builder, timeouts)
                .build()
                .expect("connect through the proxy"),
        )
    }

    fn url_with_nothing_listening() -> String {
        format!("http://127.0.0.1:{}", free_port())
    }

    fn connect_within(url: &str, connect_timeout: Duration) -> Result<(), LockError> {
        EtcdBackend::builder(url)
            .connect_timeout(connect_timeout)
            .build()
            .map(drop)
    }

    const BAD_URLS: &'static [&'static str] = &[
        "redis://127.0.0.1:2379",
        "not a url",
        "http://127.0.0.1:notaport",
        "http://user:hunter2@127.0.0.1:2379",
        "http://user:hunter2@127.0.0.1:notaport",
    ];

    fn bad_settings() -> Vec<Result<(), LockError>> {
        let base = "http://127.0.0.1:2379";
        vec![
            EtcdBackend::builder(base)
                .request_timeout(Duration::ZERO)
                .build()
                .map(drop),
            EtcdBackend::builder(base)
                .connect_timeout(Duration::ZERO)
                .build()
                .map(drop),
            EtcdBackend::builder(base)
                .watchdog_lease(Duration::ZERO)
                .build()
                .map(drop),
        ]
    }

    const TIMEOUT_WORDS: &'static str = "timed out";

    fn kill(&mut self) {
        EtcdCluster::kill(self, 0);
    }

    fn restart(&mut self) {
        EtcdCluster::restart(self, 0);
    }

    fn pause(&self) {
        EtcdCluster::pause(self, 0);
    }

    fn resume(&self) {
        EtcdCluster::resume(self, 0);
    }

    fn connect(url: &str) -> LockClient {
        LockClient::new(EtcdBackend::connect(url).expect("helper connects"))
    }

    fn connect_backend(url: &str) -> Arc<dyn DistributedLock> {
        Arc::new(EtcdBackend::connect(url).expect("helper connects"))
    }

    /// etcd's backend keeps its idle connections by itself (a few, not a setting): a client
    /// as any other.
    fn client_with_pool(&self, _size: u32) -> LockClient {
        ServerEnv::client(self)
    }

    fn client_through(&self, proxy: &TcpProxy) -> LockClient {
        LockClient::new(self.backend_through(proxy, Timeouts::default()))
    }

    /// Of the requests the cases send, only a release deletes (an acquire does when it meets
    /// a hold of its backend that is over, which these cases do not make).
    const RELEASE_REQUEST: &'static str = "request_delete_range";

    /// etcd's release keeps no record (docs/etcd.md).
    fn release_records(&self) -> usize {
        0
    }

    const KEEPS_RELEASE_RECORDS: bool = false;

    const RECORDS_LEFT_BY_A_RELEASE_OF_NOTHING: usize = 0;

    fn locks(&self) -> usize {
        keys_between(ServerEnv::port(self), &[0], &[0])
            .iter()
            // What outlives a name's keys for a while (release records, tombstones, set-once
            // answers) and clients' records are not locks.
            .filter(|key| !key.starts_with(b"dlock-"))
            .count()
    }

    fn counter(url: &str) -> Box<dyn Counter> {
        let port = url
            .rsplit(':')
            .next()
            .and_then(|port| port.trim_end_matches('/').parse().ok())
            .expect("a port in the member's URL");
        Box::new(EtcdCounter { port })
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
                watchdog: ms(3000),
                short_lease: ms(1000),
                long_lease: ms(6000),
                wait: ms(1500),
                advances: vec![ms(0), ms(0), ms(250), ms(1200), ms(3500)],
                delays: vec![ms(100), ms(750), ms(3500)],
                steps: 10,
                parallel: 4,
                // A loaded machine may keep the watchdog off the CPU for a while.
                loss_slack: Duration::from_secs(1),
                hold_back: &[""],
            },
            network_sequences: 24,
            network: None,
            differential: Timeouts {
                answer: Some(ms(500)),
                connect: Some(Duration::from_secs(1)),
                ..Timeouts::default()
            },
            // etcd's leases are whole seconds.
            differential_short_lease: Duration::from_secs(1),
        }
    }

    fn step_request(&self, name: &str) -> Vec<String> {
        step_request(&self.backend(), name)
    }

    fn differential_target(&self, target: ProxyTarget) -> ProxyTarget {
        let backend = self.backend();
        target
            .with_needles(move |name| step_request(&backend, name))
            // The backend gives up on a request held up past its timeout and closes the
            // connection; the gateway then cancels the request it had not run.
            .losing_held_requests()
    }
}

/// A counter in an etcd key, read and written with the gateway's plain requests.
struct EtcdCounter {
    port: u16,
}

impl EtcdCounter {
    /// The value and the key's mod revision (0 and 0 before the first write).
    fn get(&self) -> (i64, i64) {
        let answer = call(
            self.port,
            "/v3/kv/range",
            &json!({ "key": STANDARD.encode(COUNTER) }),
        );
        let Some(kv) = answer["kvs"].get(0) else {
            return (0, 0);
        };
        let value = kv["value"]
            .as_str()
            .and_then(|value| STANDARD.decode(value).ok())
            .and_then(|value| String::from_utf8(value).ok())
            .and_then(|value| value.parse().ok())
            .expect("a number in the counter");
        let revision = kv["mod_revision"]
            .as_str()
            .and_then(|revision| revision.parse().ok())
            .expect("a mod revision");
        (value, revision)
    }
}

impl Counter for EtcdCounter {
    fn read(&mut self) -> i64 {
        self.get().0
    }

    fn write(&mut self, value: i64) {
        call(
            self.port,
            "/v3/kv/put",
            &json!({
                "key": STANDARD.encode(COUNTER),
                "value": STANDARD.encode(value.to_string()),
            }),
        );
    }

    /// etcd has no increment: a transaction that writes only if the key is as read (the
    /// server runs it whole or not at all), again until one does.
    fn add(&mut self, delta: i64) -> i64 {
        for _ in 0..1000 {
            let (value, revision) = self.get();
            let answer = call(
                self.port,
                "/v3/kv/txn",
                &json!({
                    "compare": [{
                        "key": STANDARD.encode(COUNTER),
                        "target": "MOD",
                        "result": "EQUAL",
                        "mod_revision": revision.to_string(),
                    }],
                    "success": [{ "request_put": {
                        "key": STANDARD.encode(COUNTER),
                        "value": STANDARD.encode((value + delta).to_string()),
                    }}],
                }),
            );
            if answer["succeeded"].as_bool() == Some(true) {
                return value + delta;
            }
        }
        panic!("the counter kept changing under 1000 increments");
    }
}
