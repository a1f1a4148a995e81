//! Redis Sentinel (`--topology sentinel`): a master, two replicas and three sentinels (quorum
//! 2, a master taken for down after 1 s), server `i` and sentinel `i` together on node `i`, each
//! node in a network namespace of its own, as a deployment puts a sentinel beside each server.
//! The workers name the three sentinels (`redis-sentinel://`) and wait for a replica's
//! acknowledgement unless the fault is the unsynced failover. The sentinels promote a replica
//! by themselves; the suite only waits for them.

use std::time::{Duration, Instant};

use super::promoting::{self, Promoting};
use super::Store;
use crate::support::network::Network;
use crate::support::redis_server::RedisServer;
use crate::support::sentinel::{SentinelSetup, MASTER_NAME};
use crate::support::tcp_proxy::TcpProxy;

/// How long the sentinels may take to fail over (a master is down after 1 s; the vote and the
/// promotion take a few more).
const FAILOVER_LIMIT: Duration = Duration::from_secs(20);

pub fn start() -> Box<dyn Store> {
    let network = match Network::create(3) {
        Ok(network) => network,
        Err(error) => panic!("the sentinel topology needs its network: {error}"),
    };
    let setup = SentinelSetup::start_on_network(&network);
    Box::new(SentinelService {
        setup,
        network,
        master: 0,
        killed: None,
    })
}

struct SentinelService {
    setup: SentinelSetup,
    /// Dropped after the setup: the processes go before their namespaces.
    network: Network,
    /// The server the sentinels named master when the fault began.
    master: usize,
    /// A server a fault killed, until it is started again as a replica.
    killed: Option<usize>,
}

impl Promoting for SentinelService {
    fn network(&self) -> &Network {
        &self.network
    }

    fn servers(&self) -> usize {
        self.setup.servers.len()
    }

    /// The master as the sentinels name it now.
    fn current_master(&mut self) -> usize {
        if let Some(at) = self.setup.master_index() {
            self.master = at;
        }
        self.master
    }

    fn kill(&mut self, at: usize) {
        self.setup.servers[at].kill();
        self.killed = Some(at);
    }

    /// Waits until the sentinels name a master other than server `old` and it takes writes.
    fn await_failover(&mut self, old: usize) -> Result<(), String> {
        let deadline = Instant::now() + FAILOVER_LIMIT;
        loop {
            if let Some(at) = self.setup.master_index().filter(|at| *at != old) {
                if is_master(&self.setup, at) {
                    self.master = at;
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the sentinels promoted no replica within {FAILOVER_LIMIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl SentinelService {
    /// The master once every sentinel names the same server and it takes writes (a failover
    /// the sentinels began runs to its end first), else as most of them name it.
    fn agreed_master(&mut self) -> usize {
        let deadline = Instant::now() + FAILOVER_LIMIT;
        while Instant::now() < deadline {
            let named: Vec<Option<(String, u16)>> = self
                .setup
                .sentinels
                .iter()
                .map(|sentinel| sentinel.master_address())
                .collect();
            let agreed = named.windows(2).all(|pair| pair[0] == pair[1]);
            if let (true, Some(at)) = (agreed, self.setup.master_index()) {
                if is_master(&self.setup, at) {
                    self.master = at;
                    return at;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.current_master()
    }
}

/// Whether `server` is a replica of the server at `master` (host, port).
fn follows(server: &RedisServer, master: &(String, u16)) -> bool {
    let Ok(info) = redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut server.admin())
    else {
        return false;
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    field("role:") == Some("slave")
        && field("master_host:") == Some(master.0.as_str())
        && field("master_port:") == Some(master.1.to_string().as_str())
}

fn is_master(setup: &SentinelSetup, at: usize) -> bool {
    redis::cmd("ROLE")
        .query::<Vec<redis::Value>>(&mut setup.servers[at].admin())
        .ok()
        .and_then(|role| role.into_iter().next())
        .is_some_and(|kind| matches!(kind, redis::Value::BulkString(ref b) if b == b"master"))
}

impl Drop for SentinelService {
    fn drop(&mut self) {
        // Every process stopped before its namespace goes.
        self.setup.sentinels.clear();
        self.setup.servers.clear();
    }
}

impl Store for SentinelService {
    fn port(&self) -> u16 {
        self.setup.servers[self.master].port()
    }

    fn url(&self, _network: Option<&TcpProxy>) -> String {
        let sentinels: Vec<String> = self
            .setup
            .sentinels
            .iter()
            .map(|sentinel| sentinel.address())
            .collect();
        format!("redis-sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// Kills the master and starts it again at once, empty (no persistence): faster than the
    /// sentinels take it for down, so its replicas copy its empty dataset.
    fn restart(&mut self) {
        let at = self.current_master();
        self.setup.servers[at].restart_as_master();
    }

    fn pause(&self) {
        self.setup.servers[self.master].pause();
    }

    fn resume(&self) {
        self.setup.servers[self.master].resume();
    }

    fn kill_wakeup_connections(&self) -> Result<(), String> {
        self.setup.servers[self.master]
            .kill_pubsub_clients()
            .map(drop)
    }

    /// The master's replication to the replicas cut (what it writes meanwhile never reaches
    /// them; its sentinel still reaches the others) for `lag`, then the master killed; the
    /// sentinels promote a replica.
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        promoting::fail_over(self, lag)
    }

    /// The master's node (the master and its sentinel) cut off from the other two nodes,
    /// both ways, the clients still reaching every node, for `length` and until the other
    /// two sentinels have promoted a replica; then the partition heals and the sentinels turn
    /// the old master into a replica.
    fn partition(&mut self, length: Duration) -> Result<(), String> {
        promoting::partition(self, length, true)
    }

    /// What the master's node sends the other two dropped, what they send it still arriving,
    /// for `length` and until a replica is promoted.
    fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        promoting::partition(self, length, false)
    }

    /// What the master's clock stepping forward does to its keys (its replicas delete and
    /// shorten them as it tells them).
    fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        let at = self.current_master();
        self.setup.servers[at].jump_expiry(by).map(drop)
    }

    /// Starts a server a fault killed again, as a replica of the master; waits until the
    /// master has both replicas online again.
    fn ensure_replica(&mut self) {
        let master = self.agreed_master();
        if let Some(at) = self.killed.take() {
            let (servers, replica) = split(&mut self.setup.servers, master, at);
            replica.restart_as_replica_of(servers);
        }
        // An old master back from a partition or a pause still takes itself for one, and a
        // replica may still follow it, until the sentinels next look (their INFO comes every
        // 10 s): each is pointed at the master at once, as the sentinels would.
        let address = (
            self.setup.servers[master].host(),
            self.setup.servers[master].port(),
        );
        let deadline = Instant::now() + FAILOVER_LIMIT;
        while self.setup.servers[master].online_replicas() < 2 && Instant::now() < deadline {
            for at in (0..self.setup.servers.len()).filter(|at| *at != master) {
                if !follows(&self.setup.servers[at], &address) {
                    let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
                        .arg(&address.0)
                        .arg(address.1)
                        .query(&mut self.setup.servers[at].admin());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.setup.servers[master].await_online_replicas(2);
    }
}

/// Server `master` and server `other` of `servers`, borrowed at once.
fn split<T>(servers: &mut [T], master: usize, other: usize) -> (&T, &mut T) {
    assert_ne!(master, other);
    if master < other {
        let (left, right) = servers.split_at_mut(other);
        (&left[master], &mut right[0])
    } else {
        let (left, right) = servers.split_at_mut(master);
        (&right[0], &mut left[other])
    }
}
