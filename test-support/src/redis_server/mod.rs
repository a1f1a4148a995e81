//! Starts and stops real `redis-server` processes for tests.
//!
//! Each [`RedisServer`] is a `redis-server` of its own on a free loopback port, with no
//! persistence, in a temporary directory. It can be killed (`SIGKILL`), paused (`SIGSTOP`),
//! resumed (`SIGCONT`) and restarted on the same port (with empty data). Every process it starts
//! is stopped by its own pid when it is dropped, also when the test panics.

mod fenced_data;
mod server_env;

pub use server_env::keys;

pub use crate::ports::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::redis::RedisBackend;
use dlocks::LockClient;

use super::env::TestEnv;
use crate::network::Node;

/// How long a server may take to answer after it was started.
const STARTUP_LIMIT: Duration = Duration::from_secs(10);

/// The server's log, in its directory.
const LOG_FILE: &str = "redis.log";

/// Options for a server: extra command-line arguments, a password, TLS.
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// Extra `redis-server` arguments (`--name value` pairs).
    pub args: Vec<String>,
    /// The default user's password (`--requirepass`), used by the harness's own connections.
    pub password: Option<String>,
    /// Also listen with TLS on a second port, with a certificate made for 127.0.0.1.
    pub tls: bool,
    /// A cluster node on loopback: its cluster bus gets a free port of its own, chosen anew
    /// with each attempt to start (the default, the client port + 10,000, may be taken or
    /// past 65,535).
    pub cluster_bus: bool,
}

/// The TLS material of a TLS-enabled server.
pub struct TlsFiles {
    /// The CA certificate (PEM) that signed the server's certificate.
    pub ca_pem: String,
    /// The TLS port.
    pub port: u16,
}

/// A `redis-server` process owned by a test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    options: ServerOptions,
    tls: Option<TlsFiles>,
    /// The cluster bus port, for a cluster node on loopback.
    bus_port: Option<u16>,
    /// The network node it runs in, listening on the node's address; else on loopback.
    node: Option<Node>,
}

/// The port a server in a network node listens on: the node's ports are its own.
const NODE_PORT: u16 = 6379;

impl RedisServer {
    /// Starts a plain server.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with `options`. Panics (the test fails, never skips) if `redis-server`
    /// is not installed or does not come up.
    pub fn start_with(options: ServerOptions) -> Self {
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir: Self::new_dir(),
            options,
            tls: None,
            bus_port: None,
            node: None,
        };
        if server.options.tls {
            server.write_tls_files();
        }
        // A free port can be taken between choosing it and binding it: try a few, each with
        // all of its ports chosen anew.
        for _ in 0..5 {
            server.port = free_port();
            if let Some(tls) = &mut server.tls {
                tls.port = free_port();
            }
            if server.options.cluster_bus {
                server.bus_port = Some(free_port());
            }
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start after 5 attempts (see the messages above)");
    }

    /// Starts a server in network node `node`, listening on the node's address, port 6379.
    /// (No TLS there: the harness's certificates are made for 127.0.0.1.)
    pub fn start_on_node(node: &Node, options: ServerOptions) -> Self {
        assert!(!options.tls, "no TLS on a server in a network node");
        let mut server = RedisServer {
            child: None,
            port: NODE_PORT,
            dir: Self::new_dir(),
            options,
            tls: None,
            bus_port: None,
            node: Some(node.clone()),
        };
        server.restart();
        server
    }

    /// Starts a replica of `master` in network node `node`, and waits until the master lists
    /// it as online.
    pub fn start_replica_on_node(master: &RedisServer, node: &Node) -> Self {
        let online = master.online_replicas();
        let replica = Self::start_on_node(node, master.replica_options(master.port));
        master.await_online_replicas(online + 1);
        replica
    }

    fn new_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "dlock-redis-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("create the server's temp dir");
        dir
    }

    /// Starts a replica of `master` and waits until the master lists it as online.
    pub fn start_replica_of(master: &RedisServer) -> Self {
        Self::start_replica_via(master, master.port)
    }

    /// Starts a replica of `master` that reaches it on `port` (a proxy in between, say), and
    /// waits until the master lists it as online.
    pub fn start_replica_via(master: &RedisServer, port: u16) -> Self {
        let online = master.online_replicas();
        let replica = Self::start_with(master.replica_options(port));
        master.await_online_replicas(online + 1);
        replica
    }

    /// The options of a replica of this server that reaches it on `port` of its host.
    pub fn replica_options(&self, port: u16) -> ServerOptions {
        let mut options = self.options.clone();
        options.tls = false;
        options
            .args
            .extend(["--replicaof".into(), self.host(), port.to_string()]);
        if let Some(password) = &self.options.password {
            options
                .args
                .extend(["--masterauth".into(), password.clone()]);
        }
        options
    }

    /// The replicas the master lists as online (`ROLE`).
    pub fn online_replicas(&self) -> usize {
        let role: redis::Value = redis::cmd("ROLE").query(&mut self.admin()).expect("ROLE");
        match role {
            redis::Value::Array(items) => match items.get(2) {
                Some(redis::Value::Array(replicas)) => replicas.len(),
                _ => 0,
            },
            other => panic!("unexpected ROLE reply {other:?}"),
        }
    }

    /// Waits until the master lists `count` online replicas and they acknowledge its writes
    /// (a replica listed online may still be loading its first copy; bounded: 10 s).
    pub fn await_online_replicas(&self, count: usize) {
        let deadline = Instant::now() + STARTUP_LIMIT;
        let mut admin = self.admin();
        loop {
            let acknowledged = self.online_replicas() == count && {
                let (_, acks): ((), i64) = redis::pipe()
                    .cmd("SET")
                    .arg("dlock:harness:replicated")
                    .arg(1)
                    .cmd("WAIT")
                    .arg(count)
                    .arg(100)
                    .query(&mut admin)
                    .expect("SET + WAIT");
                acks == count as i64
            };
            if acknowledged {
                let _: () = redis::cmd("DEL")
                    .arg("dlock:harness:replicated")
                    .query(&mut admin)
                    .expect("DEL");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "port {} did not get to {count} acknowledging replicas",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the running process, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>/` with the default user's password, if any.
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(password) => format!("redis://:{password}@{}:{}/", self.host(), self.port),
            None => format!("redis://{}:{}/", self.host(), self.port),
        }
    }

    /// A URL for `user` with `password`.
    pub fn url_for(&self, user: &str, password: &str) -> String {
        format!("redis://{user}:{password}@{}:{}/", self.host(), self.port)
    }

    /// The address it listens on: loopback, or its network node's.
    pub fn host(&self) -> String {
        match &self.node {
            Some(node) => node.address().to_string(),
            None => "127.0.0.1".to_owned(),
        }
    }

    /// Starts it again, empty, as a master (whatever it was started as).
    pub fn restart_as_master(&mut self) {
        if let Some(at) = self
            .options
            .args
            .iter()
            .position(|arg| arg == "--replicaof")
        {
            self.options
                .args
                .drain(at..(at + 3).min(self.options.args.len()));
        }
        self.restart();
    }

    /// Starts it again as a replica of `master` (on `master`'s own port), empty. (Other
    /// replicas may be joining `master` meanwhile: waiting for them is the caller's.)
    pub fn restart_as_replica_of(&mut self, master: &RedisServer) {
        self.kill();
        self.options = master.replica_options(master.port);
        self.options.password = master.options.password.clone();
        self.restart();
    }

    /// The TLS material, for a server started with `tls: true`.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// A plain connection (not through dlock) for inspecting and changing the server.
    pub fn admin(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("admin client");
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("admin connection");
        con.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        con
    }

    /// A backend on this server with bounded test timeouts.
    pub fn backend(&self) -> RedisBackend {
        self.backend_builder()
            .build()
            .expect("connect to the test server")
    }

    /// A builder for a backend on this server with bounded test timeouts.
    pub fn backend_builder(&self) -> dlocks::redis::RedisBackendBuilder {
        RedisBackend::builder(&self.url())
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .checkout_timeout(Duration::from_secs(3))
    }

    /// Waits until the server reports a subscriber on `channel` (bounded: 5 s).
    pub fn await_subscriber(&self, channel: &str) {
        let mut admin = self.admin();
        for _ in 0..500 {
            let counts: (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query(&mut admin)
                .expect("PUBSUB NUMSUB");
            if counts.1 > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("nobody subscribed to {channel}");
    }

    /// Returns once the server has run every command already sent to it, by any client: two
    /// round trips on a connection of its own. Redis runs the clients that are ready in each
    /// turn of its event loop, in no set order, so the first reply may come before another
    /// client's command already sent; the second comes from a later turn, after it.
    pub fn settle(&self) {
        let mut admin = self.admin();
        for _ in 0..2 {
            let _: String = redis::cmd("PING").query(&mut admin).expect("PING");
        }
    }

    /// Waits until at least `count` channels matching `pattern` have subscribers (bounded: 5 s).
    pub fn await_channels(&self, pattern: &str, count: usize) {
        let mut admin = self.admin();
        for _ in 0..500 {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(pattern)
                .query(&mut admin)
                .expect("PUBSUB CHANNELS");
            if channels.len() >= count {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("fewer than {count} channels matching {pattern} were subscribed");
    }

    /// Drops every pub/sub connection of its clients (`CLIENT KILL TYPE pubsub`, sharded
    /// subscribers included); returns how many.
    pub fn kill_pubsub_clients(&self) -> Result<usize, String> {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query::<usize>(&mut self.admin())
            .map_err(|error| format!("CLIENT KILL: {error}"))
    }

    /// Does to its keys what its wall clock stepping forward by `by` would (Redis keeps each
    /// key's expiry as a wall-clock time): every key with less than `by` to live is deleted,
    /// every other key's time to live shortened by `by`, each key in one step (a script), the
    /// replicas told as they are of any write. Returns how many keys it deleted. (The server
    /// cannot run on a stepped clock itself: Debian's build uses jemalloc, which hangs under
    /// `libfaketime`.)
    pub fn jump_expiry(&self, by: Duration) -> Result<usize, String> {
        let mut admin = self.admin();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut admin)
            .map_err(|error| format!("KEYS: {error}"))?;
        let step = redis::Script::new(
            "local left = redis.call('PTTL', KEYS[1]) \
             if left < 0 then return 0 end \
             if left <= tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) return 1 end \
             redis.call('PEXPIRE', KEYS[1], left - tonumber(ARGV[1])) return 0",
        );
        let mut deleted = 0;
        for key in keys {
            let gone: usize = step
                .key(&key)
                .arg(by.as_millis() as u64)
                .invoke(&mut admin)
                .map_err(|error| format!("shortening {key:?}: {error}"))?;
            deleted += gone;
        }
        Ok(deleted)
    }

    /// Kills the server at once (`SIGKILL`): no reply to anything in flight, all data gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (`SIGSTOP`): connections stay open, nothing is answered.
    pub fn pause(&self) {
        crate::signals::stop(self.pid().expect("the server is running"));
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server if it runs, then starts a new one on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + STARTUP_LIMIT;
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().expect("the server is running");
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Starts the process and waits until it answers; false if it exited (port taken).
    fn spawn(&mut self) -> bool {
        let mut command = match &self.node {
            Some(node) => node.command("redis-server"),
            None => Command::new("redis-server"),
        };
        if self.node.is_some() {
            // Clients come over the test network's bridge, not loopback, and the server has
            // no password: protected mode would refuse them. The network is the test's own.
            command.args(["--protected-mode", "no"]);
        }
        command
            .current_dir(&self.dir)
            .args(["--bind", &self.host(), "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // A replica's first sync starts at once instead of after 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--dir"])
            .arg(&self.dir)
            .args(["--logfile", LOG_FILE])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(password) = &self.options.password {
            command.args(["--requirepass", password]);
        }
        if let Some(tls) = &self.tls {
            command
                .args(["--tls-port", &tls.port.to_string()])
                .args([
                    "--tls-cert-file",
                    "server.crt",
                    "--tls-key-file",
                    "server.key",
                ])
                .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no"]);
        }
        if let Some(bus_port) = self.bus_port {
            command.args(["--cluster-port", &bus_port.to_string()]);
        }
        command.args(&self.options.args);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (install the Debian package `redis-server`); \
                 the Redis tests need it"
            ),
            Err(error) => panic!("could not start redis-server: {error}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    eprintln!(
                        "redis-server on port {} exited at start: {status}; its log ends:\n{}",
                        self.port,
                        self.log_tail()
                    );
                    self.child = None;
                    return false;
                }
            }
            if self.answers() {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// Whether this server answers on its port. Another test's server that took the port
    /// first would answer too, until its own test stops it: only the process we started
    /// counts (ours then fails to bind, exits, and the start is tried on another port).
    fn answers(&self) -> bool {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return false;
        };
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        let _ = con.set_read_timeout(Some(Duration::from_millis(500)));
        let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut con) else {
            return false;
        };
        info.lines()
            .filter_map(|line| line.strip_prefix("process_id:"))
            .any(|serving| serving.trim() == pid.to_string())
    }

    fn write_tls_files(&mut self) {
        let certificates = super::test_certificates::TestCertificates::generate();
        std::fs::write(self.dir.join("ca.crt"), &certificates.ca_pem).expect("write ca.crt");
        std::fs::write(self.dir.join("server.crt"), &certificates.server_cert_pem)
            .expect("write server.crt");
        std::fs::write(self.dir.join("server.key"), &certificates.server_key_pem)
            .expect("write server.key");
        self.tls = Some(TlsFiles {
            ca_pem: certificates.ca_pem,
            port: 0,
        });
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused process would ignore nothing, but make sure it is not left stopped.
            self.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a thread that waits up to 30 s for `name` on a client of its own, sends the instant
/// it got the lock, and releases it.
pub fn spawn_waiter(
    backend: RedisBackend,
    name: &'static str,
) -> (
    std::thread::JoinHandle<()>,
    std::sync::mpsc::Receiver<Instant>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let client = LockClient::new(backend);
        let lock = client.lock(name);
        let guard = lock
            .try_lock_for(Duration::from_secs(30))
            .expect("wait")
            .expect("acquired");
        tx.send(Instant::now()).expect("send");
        guard.unlock().expect("unlock");
    });
    (waiter, rx)
}

/// The conformance suite's environment on a real server of its own.
pub struct RedisEnv {
    pub server: RedisServer,
    pub backend: RedisBackend,
}

impl RedisEnv {
    /// Starts a server and connects a backend.
    pub fn start() -> Self {
        let server = RedisServer::start();
        let backend = server.backend();
        RedisEnv { server, backend }
    }
}

impl TestEnv for RedisEnv {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn unit(&self) -> Duration {
        // Leases of a few units must survive a loaded 2-core VM running tests in parallel, where
        // a thread can be kept off the CPU for a few hundred milliseconds.
        Duration::from_millis(200)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }
}

/// The conformance suite's environment on a RedLock of three servers of its own.
pub struct RedLockEnv {
    pub servers: Vec<RedisServer>,
    pub backend: dlocks::redis::RedLockBackend,
}

impl RedLockEnv {
    /// Starts three servers and builds a RedLock over them.
    pub fn start() -> Self {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let backend = Self::red_lock(&servers);
        RedLockEnv { servers, backend }
    }

    /// A RedLock over `servers` with test timeouts (a node timeout generous enough for a
    /// loaded machine).
    pub fn red_lock(servers: &[RedisServer]) -> dlocks::redis::RedLockBackend {
        dlocks::redis::RedLockBackend::builder(servers.iter().map(RedisServer::backend).collect())
            .node_timeout(Duration::from_millis(300))
            .build()
            .expect("a RedLock over the test servers")
    }
}

impl TestEnv for RedLockEnv {
    fn name(&self) -> &'static str {
        "redlock (3 servers)"
    }

    fn unit(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }
}
