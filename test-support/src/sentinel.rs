//! A Redis Sentinel deployment of real processes: a master, two replicas and three
//! `redis-sentinel` processes watching it (quorum 2, the master taken for down after 1 s).
//! Every process is stopped by its own id when the setup is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::{free_port, RedisServer};
use crate::network::{Network, Node};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "dlockmaster";

/// How long sentinels take to take a silent master for down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// The bound on the sentinels discovering each other and the replicas, and on a failover.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// One `redis-sentinel` process.
pub struct SentinelProcess {
    child: Option<Child>,
    host: String,
    port: u16,
    dir: PathBuf,
}

/// The port a sentinel in a network node listens on.
const NODE_PORT: u16 = 26379;

impl SentinelProcess {
    /// A sentinel watching `master`, on a free loopback port, or in network node `node` (on
    /// the node's address, port 26379).
    fn start(master: &RedisServer, node: Option<&Node>, password: Option<&str>) -> Self {
        for _ in 0..5 {
            let (host, port) = match node {
                Some(node) => (node.address().to_string(), NODE_PORT),
                None => ("127.0.0.1".to_owned(), free_port()),
            };
            let dir = std::env::temp_dir().join(format!(
                "dlock-sentinel-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&dir).expect("the sentinel's temp dir");
            let config = dir.join("sentinel.conf");
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind {host}\nprotected-mode {protected}\ndaemonize no\n\
                     dir {dir}\n\
                     sentinel monitor {MASTER_NAME} {master_host} {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
                     sentinel failover-timeout {MASTER_NAME} 10000\n\
                     sentinel parallel-syncs {MASTER_NAME} 2\n{auth}",
                    dir = dir.display(),
                    // In a network node, clients come over the test network's bridge.
                    protected = if node.is_some() { "no" } else { "yes" },
                    master_host = master.host(),
                    master_port = master.port(),
                    down = DOWN_AFTER.as_millis(),
                    auth = password
                        .map(|password| format!("sentinel auth-pass {MASTER_NAME} {password}\n"))
                        .unwrap_or_default(),
                ),
            )
            .expect("write sentinel.conf");
            let mut command = match node {
                Some(node) => node.command("redis-sentinel"),
                None => Command::new("redis-sentinel"),
            };
            let child = command
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("redis-sentinel is installed (Debian package redis-sentinel)");
            let mut sentinel = SentinelProcess {
                child: Some(child),
                host,
                port,
                dir,
            };
            if sentinel.answers() {
                return sentinel;
            }
            sentinel.stop();
        }
        panic!("redis-sentinel did not start after 5 attempts");
    }

    /// Waits until it answers; false if it exited (port taken) or never answered. Another
    /// test's server that took the port first answers too, until its test stops it: only the
    /// process we started counts (ours then fails to bind and exits).
    fn answers(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let Some(child) = &mut self.child else {
                return false;
            };
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            let pid = child.id().to_string();
            if let Ok(info) = self.query::<String>(redis::cmd("INFO").arg("server")) {
                return info
                    .lines()
                    .filter_map(|line| line.strip_prefix("process_id:"))
                    .any(|serving| serving.trim() == pid);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.host, self.port)
    }

    /// Its `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        cmd.query(&mut con)
    }

    /// The port of the master this sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.master_address().map(|(_, port)| port)
    }

    /// The host and port of the master this sentinel names now.
    pub fn master_address(&self) -> Option<(String, u16)> {
        let reply: Option<(String, String)> = self
            .query(
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(MASTER_NAME),
            )
            .ok()?;
        reply.and_then(|(host, port)| Some((host, port.parse().ok()?)))
    }

    /// How many replicas and other sentinels it knows of.
    fn known(&self) -> (usize, usize) {
        let count = |what: &str| {
            self.query::<Vec<redis::Value>>(redis::cmd("SENTINEL").arg(what).arg(MASTER_NAME))
                .map_or(0, |list| list.len())
        };
        (count("replicas"), count("sentinels"))
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, two replicas and three sentinels.
pub struct SentinelSetup {
    /// The data servers: the first is the master at the start.
    pub servers: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<SentinelProcess>,
}

impl SentinelSetup {
    /// Starts every process and waits until each sentinel knows both replicas and the other
    /// two sentinels, so a failover can be voted.
    pub fn start() -> Self {
        Self::start_unsettled().settled()
    }

    /// Waits until each sentinel knows both replicas and the other two sentinels.
    fn settled(self) -> Self {
        let deadline = Instant::now() + SETTLE_LIMIT;
        loop {
            let known: Vec<(usize, usize)> =
                self.sentinels.iter().map(SentinelProcess::known).collect();
            if known.iter().all(|known| *known == (2, 2)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not find the replicas and each other within {SETTLE_LIMIT:?} \
                 (replicas and other sentinels each knows: {known:?})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self
    }

    /// Starts every process without waiting for the sentinels to find each other (they name
    /// the master from the start; a failover is not possible until they have met).
    pub fn start_unsettled() -> Self {
        Self::start_unsettled_with(None)
    }

    /// As [`start`](Self::start), the master and replicas requiring `password`.
    pub fn start_with_password(password: &str) -> Self {
        Self::start_unsettled_with(Some(password)).settled()
    }

    fn start_unsettled_with(password: Option<&str>) -> Self {
        let master = RedisServer::start_with(super::redis_server::ServerOptions {
            password: password.map(str::to_owned),
            ..Default::default()
        });
        let replicas = [
            RedisServer::start_replica_of(&master),
            RedisServer::start_replica_of(&master),
        ];
        let mut servers = vec![master];
        servers.extend(replicas);
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|_| SentinelProcess::start(&servers[0], None, password))
            .collect();
        SentinelSetup { servers, sentinels }
    }

    /// The deployment on `network` (three nodes at least): server `i` and sentinel `i` on node
    /// `i`, node 0's server the master; returns once the sentinels know both replicas and
    /// each other.
    pub fn start_on_network(network: &Network) -> Self {
        let master = RedisServer::start_on_node(network.node(0), Default::default());
        let replicas = [
            RedisServer::start_replica_on_node(&master, network.node(1)),
            RedisServer::start_replica_on_node(&master, network.node(2)),
        ];
        let mut servers = vec![master];
        servers.extend(replicas);
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|at| SentinelProcess::start(&servers[0], Some(network.node(at)), None))
            .collect();
        SentinelSetup { servers, sentinels }.settled()
    }

    /// Which server most sentinels that answer name as the master now (a sentinel cut off
    /// from the others may still name an old one).
    pub fn master_index(&self) -> Option<usize> {
        let mut votes = vec![0; self.servers.len()];
        for (host, port) in self
            .sentinels
            .iter()
            .filter_map(SentinelProcess::master_address)
        {
            if let Some(at) = self
                .servers
                .iter()
                .position(|server| server.host() == host && server.port() == port)
            {
                votes[at] += 1;
            }
        }
        let most = votes.iter().copied().max().filter(|most| *most > 0)?;
        votes.iter().position(|count| *count == most)
    }

    /// The sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProcess::url).collect()
    }

    /// A backend builder for the master, through the sentinels.
    pub fn backend_builder(&self) -> dlocks::redis::RedisBackendBuilder {
        dlocks::redis::RedisBackend::sentinel_builder(MASTER_NAME, self.urls())
    }

    /// The port of the master, as the sentinels name it now.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(SentinelProcess::master_port)
            .expect("a sentinel names the master")
    }

    /// Kills the master process (`SIGKILL`); returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        let master = self
            .servers
            .iter_mut()
            .find(|server| server.port() == port)
            .expect("the master is one of the setup's servers");
        master.kill();
        port
    }

    /// Waits until the sentinels name a master other than the one on `old_port`, and it
    /// answers as a master; returns its port.
    pub fn await_failover(&self, old_port: u16) -> u16 {
        let deadline = Instant::now() + SETTLE_LIMIT;
        loop {
            let named = self
                .sentinels
                .iter()
                .filter_map(SentinelProcess::master_port)
                .find(|port| *port != old_port);
            if let Some(port) = named {
                let server = self.servers.iter().find(|s| s.port() == port);
                let is_master = server.is_some_and(|server| {
                    redis::cmd("ROLE")
                        .query::<Vec<redis::Value>>(&mut server.admin())
                        .ok()
                        .and_then(|role| role.into_iter().next())
                        .is_some_and(|kind| {
                            matches!(kind, redis::Value::BulkString(ref b) if b == b"master")
                        })
                });
                if is_master {
                    return port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {SETTLE_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The conformance suite's environment on a Sentinel deployment of its own.
pub struct SentinelEnv {
    pub setup: SentinelSetup,
    pub backend: dlocks::redis::RedisBackend,
}

impl SentinelEnv {
    /// Starts the deployment and connects a backend through the sentinels (no failover
    /// happens in the suite, so the sentinels need not have met).
    pub fn start() -> Self {
        let setup = SentinelSetup::start_unsettled();
        let backend = setup
            .backend_builder()
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .build()
            .expect("connect through the sentinels");
        SentinelEnv { setup, backend }
    }
}

impl super::env::TestEnv for SentinelEnv {
    fn name(&self) -> &'static str {
        "redis sentinel (master, 2 replicas, 3 sentinels)"
    }

    fn unit(&self) -> std::time::Duration {
        Duration::from_millis(200)
    }

    fn backend(&self) -> std::sync::Arc<dyn dlocks::backend::DistributedLock> {
        std::sync::Arc::new(self.backend.clone())
    }
}
