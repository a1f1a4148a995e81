//! A Redis Cluster of real processes, built with `redis-cli --cluster create`: masters with
//! replicas, a short node timeout so failovers take seconds, and slot migrations in steps so a
//! test can act while a slot is half moved. Every node is a [`RedisServer`], stopped by its own
//! pid when the setup is dropped.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::network::Network;
use super::redis_server::{RedisServer, ServerOptions};

/// How long a silent node takes to be suspected failing (`cluster-node-timeout`).
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The number of hash slots.
pub const SLOTS: usize = 16384;

/// The bound on building the cluster, on a failover and on a slot migration.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The bound on each of the harness's own queries: a paused node stalls a poll briefly.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// One range of `CLUSTER SLOTS`, nodes given by their `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot.
    pub start: u16,
    /// The last slot (inclusive).
    pub end: u16,
    /// The address of the master serving the range.
    pub master: String,
    /// The addresses of its replicas.
    pub replicas: Vec<String>,
}

/// A Redis Cluster of `redis-server` processes on 127.0.0.1, or each in a network node.
pub struct ClusterSetup {
    /// Every node; which are masters is up to `redis-cli` and later failovers (see
    /// [`masters`](Self::masters)).
    pub nodes: Vec<RedisServer>,
    replicas_per_master: usize,
}

impl ClusterSetup {
    /// Starts `masters * (1 + replicas_per_master)` nodes, builds the cluster and waits
    /// (bounded) until every node sees all slots served, agrees on who serves them, and each
    /// master has its replicas online (their first sync done), so a test races nothing.
    pub fn start(masters: usize, replicas_per_master: usize) -> Self {
        let nodes = (0..masters * (1 + replicas_per_master))
            .map(|_| RedisServer::start_with(node_options(true)))
            .collect();
        Self::create_from(nodes, masters, replicas_per_master)
    }

    /// As [`start`](Self::start), node `i` in `network`'s node `i` (so links between nodes,
    /// and between a node and the clients, can be cut).
    pub fn start_on_network(network: &Network, masters: usize, replicas_per_master: usize) -> Self {
        let nodes = (0..masters * (1 + replicas_per_master))
            .map(|at| RedisServer::start_on_node(network.node(at), node_options(false)))
            .collect();
        Self::create_from(nodes, masters, replicas_per_master)
    }

    fn create_from(nodes: Vec<RedisServer>, masters: usize, replicas_per_master: usize) -> Self {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters"
        );
        let began = Instant::now();
        let setup = ClusterSetup {
            nodes,
            replicas_per_master,
        };
        setup.create();
        setup.await_settled(masters);
        eprintln!(
            "cluster of {masters} masters x {replicas_per_master} replicas ready in {:?}",
            began.elapsed()
        );
        setup
    }

    /// `redis://<host>:<port>` of every running node (killed ones left out).
    pub fn urls(&self) -> Vec<String> {
        self.running()
            .map(|i| format!("redis://{}", self.address(i)))
            .collect()
    }

    /// The slot of `key`, as a live node computes it (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.ask_any(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// The index of the node serving `slot` now, by the first live node's `CLUSTER SLOTS`.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let ranges = self.ask_any_slots();
        let address = owner(&ranges, slot)
            .unwrap_or_else(|| panic!("no node serves slot {slot}: {ranges:?}"));
        self.index_of(address)
    }

    /// One name per master (in [`masters`](Self::masters)' order), `prefix` and a number,
    /// each in a slot that master serves: a multi-lock over them asks every master.
    pub fn name_on_each_master(&self, prefix: &str) -> Vec<String> {
        self.masters()
            .into_iter()
            .map(|master| {
                (0..1000)
                    .map(|i| format!("{prefix}{i}"))
                    .find(|name| self.master_of_slot(self.slot_of(name)) == master)
                    .unwrap_or_else(|| panic!("no name {prefix}N on master {master}"))
            })
            .collect()
    }

    /// The running nodes that serve slots, by the first live node's `CLUSTER SLOTS`, in
    /// index order.
    pub fn masters(&self) -> Vec<usize> {
        let mut masters: Vec<usize> = self
            .ask_any_slots()
            .iter()
            .map(|range| self.index_of(&range.master))
            .filter(|&i| self.nodes[i].pid().is_some())
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// A running master other than `than` (the first by index).
    pub fn other_master(&self, than: usize) -> usize {
        self.masters()
            .into_iter()
            .find(|&i| i != than)
            .unwrap_or_else(|| panic!("no running master other than node {than}"))
    }

    /// The replicas of `master` by the first live node's `CLUSTER SLOTS`, in index order.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let address = self.address(master);
        let ranges = self.ask_any_slots();
        let range = ranges
            .iter()
            .find(|range| range.master == address)
            .unwrap_or_else(|| panic!("node {master} serves no slots: {ranges:?}"));
        let mut replicas: Vec<usize> = range.replicas.iter().map(|a| self.index_of(a)).collect();
        replicas.sort_unstable();
        replicas
    }

    /// The node's id (`CLUSTER MYID`).
    pub fn id(&self, node: usize) -> String {
        self.ask(node, redis::cmd("CLUSTER").arg("MYID"))
            .unwrap_or_else(|error| panic!("CLUSTER MYID on node {node}: {error}"))
    }

    /// Kills the node at once (`SIGKILL`).
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].kill();
    }

    /// Waits (bounded) until a node other than `dead` answers `ROLE` as master, serves `slot`
    /// by a live node's `CLUSTER SLOTS`, and reports `cluster_state:ok`; returns its index.
    pub fn await_failover(&self, dead: usize, slot: u16) -> usize {
        self.try_await_failover(dead, slot)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// As [`await_failover`](Self::await_failover), with an error instead of a panic when no
    /// node took the slot over in time.
    pub fn try_await_failover(&self, dead: usize, slot: u16) -> Result<usize, String> {
        let began = Instant::now();
        let deadline = began + SETTLE_LIMIT;
        let dead_address = self.address(dead);
        loop {
            let promoted = self
                .running()
                .filter(|&i| i != dead)
                .find_map(|i| self.slots(i).ok())
                .and_then(|ranges| owner(&ranges, slot).map(str::to_owned))
                .filter(|address| *address != dead_address)
                .map(|address| self.index_of(&address))
                .filter(|&i| self.is_master(i) && self.state_ok(i));
            if let Some(node) = promoted {
                eprintln!(
                    "node {node} took slot {slot} over from node {dead} in {:?}",
                    began.elapsed()
                );
                return Ok(node);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no node took slot {slot} over from node {dead} within {SETTLE_LIMIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts moving `slot` from the node serving it to master `to`: the target is set
    /// importing, then the source migrating. Until [`SlotMigration::finish`], the source
    /// answers ASK for keys it no longer has.
    pub fn migrate(&self, slot: u16, to: usize) -> SlotMigration<'_> {
        let from = self.master_of_slot(slot);
        assert_ne!(from, to, "node {to} already serves slot {slot}");
        assert!(self.is_master(to), "node {to} is not a master");
        let migration = SlotMigration {
            setup: self,
            slot,
            from,
            to,
            from_id: self.id(from),
            to_id: self.id(to),
        };
        migration.set_slot(to, "IMPORTING", &migration.from_id);
        migration.set_slot(from, "MIGRATING", &migration.to_id);
        migration
    }

    /// Moves `slot` with its keys to master `to` in one go.
    pub fn move_slot(&self, slot: u16, to: usize) {
        self.migrate(slot, to).finish();
    }

    /// The indices of the running nodes.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].pid().is_some())
    }

    /// Node `node`'s `host:port`, as the cluster names it.
    pub fn address(&self, node: usize) -> String {
        format!("{}:{}", self.nodes[node].host(), self.nodes[node].port())
    }

    /// The node at `address` (`host:port`).
    pub fn index_of(&self, address: &str) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.address(i) == address)
            .unwrap_or_else(|| panic!("{address} is none of the cluster's nodes"))
    }

    /// Runs `cmd` on `node` over a connection of its own, with short timeouts.
    fn ask<T: redis::FromRedisValue>(
        &self,
        node: usize,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let client = redis::Client::open(format!("redis://{}", self.address(node)))?;
        let mut con = client.get_connection_with_timeout(QUERY_TIMEOUT)?;
        con.set_read_timeout(Some(QUERY_TIMEOUT))?;
        con.set_write_timeout(Some(QUERY_TIMEOUT))?;
        cmd.query(&mut con)
    }

    /// Runs `cmd` on the first running node that answers.
    fn ask_any<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut errors = Vec::new();
        for i in self.running() {
            match self.ask(i, cmd) {
                Ok(value) => return value,
                Err(error) => errors.push(format!("node {i}: {error}")),
            }
        }
        panic!("no running node answered {cmd:?}: {errors:?}");
    }

    fn ask_any_slots(&self) -> Vec<SlotRange> {
        parse_slots(self.ask_any(redis::cmd("CLUSTER").arg("SLOTS")))
    }

    /// The node's `CLUSTER SLOTS`.
    pub fn slots(&self, node: usize) -> redis::RedisResult<Vec<SlotRange>> {
        self.ask(node, redis::cmd("CLUSTER").arg("SLOTS"))
            .map(parse_slots)
    }

    fn is_master(&self, node: usize) -> bool {
        self.ask::<Vec<redis::Value>>(node, &redis::cmd("ROLE"))
            .ok()
            .and_then(|role| role.into_iter().next())
            .is_some_and(|kind| matches!(kind, redis::Value::BulkString(ref b) if b == b"master"))
    }

    /// `CLUSTER INFO` as `name -> value`.
    fn info(&self, node: usize) -> redis::RedisResult<Vec<(String, String)>> {
        let text: String = self.ask(node, redis::cmd("CLUSTER").arg("INFO"))?;
        Ok(text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect())
    }

    fn state_ok(&self, node: usize) -> bool {
        self.info(node)
            .is_ok_and(|info| info.iter().any(|(k, v)| k == "cluster_state" && v == "ok"))
    }

    /// Replicas the node lists with `state=online` (`INFO replication`).
    fn online_replicas(&self, node: usize) -> redis::RedisResult<usize> {
        let text: String = self.ask(node, redis::cmd("INFO").arg("replication"))?;
        Ok(text
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .count())
    }

    /// Runs `redis-cli --cluster create` over every node, bounded, and checks its status.
    fn create(&self) {
        let mut command = Command::new("redis-cli");
        command.args(["--cluster", "create"]);
        for node in 0..self.nodes.len() {
            command.arg(self.address(node));
        }
        command
            .args(["--cluster-replicas", &self.replicas_per_master.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-cli is not installed (Debian package `redis-tools`); the cluster tests \
                 need it"
            ),
            Err(error) => panic!("could not start redis-cli: {error}"),
        };
        let (status, output) = wait_bounded(child, SETTLE_LIMIT, "redis-cli --cluster create");
        assert!(
            status.success(),
            "redis-cli --cluster create failed ({status}):\n{output}"
        );
    }

    /// Waits until every node knows every other, sees all slots served by the same `masters`
    /// nodes with their replicas, reports `cluster_state:ok`, and each master has its replicas
    /// online.
    pub fn await_settled(&self, masters: usize) {
        let deadline = Instant::now() + SETTLE_LIMIT;
        loop {
            let missing = match self.settled(masters) {
                Ok(()) => return,
                Err(missing) => missing,
            };
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle within {SETTLE_LIMIT:?}: {missing}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `Ok` if the cluster is settled, else what is still missing.
    fn settled(&self, masters: usize) -> Result<(), String> {
        let mut first: Option<Vec<SlotRange>> = None;
        for i in 0..self.nodes.len() {
            let info = self.info(i).map_err(|e| format!("node {i}: {e}"))?;
            let field = |name: &str| {
                info.iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.as_str())
                    .unwrap_or("")
            };
            if field("cluster_state") != "ok" {
                return Err(format!(
                    "node {i}: cluster_state {}",
                    field("cluster_state")
                ));
            }
            if field("cluster_known_nodes") != self.nodes.len().to_string() {
                return Err(format!(
                    "node {i} knows {} nodes",
                    field("cluster_known_nodes")
                ));
            }
            let ranges = self.slots(i).map_err(|e| format!("node {i}: {e}"))?;
            let covered: usize = ranges
                .iter()
                .map(|r| usize::from(r.end) - usize::from(r.start) + 1)
                .sum();
            if covered != SLOTS {
                return Err(format!("node {i} sees {covered} slots served"));
            }
            let mut serving: Vec<&str> = ranges.iter().map(|r| r.master.as_str()).collect();
            serving.sort_unstable();
            serving.dedup();
            if serving.len() != masters {
                return Err(format!("node {i} sees {} masters", serving.len()));
            }
            if let Some(r) = ranges
                .iter()
                .find(|r| r.replicas.len() != self.replicas_per_master)
            {
                return Err(format!("node {i} sees {r:?}"));
            }
            let mut sorted = ranges;
            sorted.sort_by_key(|r| r.start);
            for r in &mut sorted {
                r.replicas.sort_unstable();
            }
            match &first {
                None => first = Some(sorted),
                Some(first) if *first != sorted => {
                    return Err(format!("node {i} sees {sorted:?}, node 0 {first:?}"));
                }
                Some(_) => {}
            }
        }
        for address in first
            .iter()
            .flatten()
            .map(|r| r.master.as_str())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let i = self.index_of(address);
            let online = self
                .online_replicas(i)
                .map_err(|e| format!("node {i}: {e}"))?;
            if online != self.replicas_per_master {
                return Err(format!("master {i} has {online} replicas online"));
            }
        }
        Ok(())
    }
}

/// A slot being moved between two masters (see [`ClusterSetup::migrate`]).
pub struct SlotMigration<'a> {
    setup: &'a ClusterSetup,
    slot: u16,
    from: usize,
    to: usize,
    from_id: String,
    to_id: String,
}

impl SlotMigration<'_> {
    /// The node the slot is moved from.
    pub fn source(&self) -> usize {
        self.from
    }

    /// The node the slot is moved to.
    pub fn target(&self) -> usize {
        self.to
    }

    /// Moves up to `limit` of the slot's keys to the target (`MIGRATE`); returns how many.
    pub fn move_keys(&self, limit: usize) -> usize {
        let keys: Vec<Vec<u8>> = self
            .setup
            .ask(
                self.from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(self.slot)
                    .arg(limit),
            )
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT on node {}: {e}", self.from));
        if keys.is_empty() {
            return 0;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg(self.setup.nodes[self.to].host())
            .arg(self.setup.nodes[self.to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys);
        let _: redis::Value = self.setup.ask(self.from, &migrate).unwrap_or_else(|e| {
            panic!(
                "MIGRATE of {} keys of slot {} from node {} to node {}: {e}",
                keys.len(),
                self.slot,
                self.from,
                self.to
            )
        });
        keys.len()
    }

    /// Moves the remaining keys, gives the slot to the target (`CLUSTER SETSLOT NODE` on the
    /// target, the source and every other master), and waits (bounded) until every running
    /// node's `CLUSTER SLOTS` names the target for it.
    pub fn finish(self) {
        let deadline = Instant::now() + SETTLE_LIMIT;
        while self.move_keys(100) > 0 {
            assert!(
                Instant::now() < deadline,
                "the keys of slot {} were not moved within {SETTLE_LIMIT:?}",
                self.slot
            );
        }
        let masters = self.setup.masters();
        self.set_slot(self.to, "NODE", &self.to_id);
        self.set_slot(self.from, "NODE", &self.to_id);
        for &other in masters.iter().filter(|&&m| m != self.to && m != self.from) {
            self.set_slot(other, "NODE", &self.to_id);
        }
        let to_address = self.setup.address(self.to);
        loop {
            let behind: Vec<usize> = self
                .setup
                .running()
                .filter(|&i| {
                    self.setup.slots(i).map_or(true, |ranges| {
                        owner(&ranges, self.slot) != Some(to_address.as_str())
                    })
                })
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nodes {behind:?} did not see slot {} on node {} within {SETTLE_LIMIT:?}",
                self.slot,
                self.to
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn set_slot(&self, node: usize, state: &str, id: &str) {
        let _: () = self
            .setup
            .ask(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg(state)
                    .arg(id),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "CLUSTER SETSLOT {} {state} {id} on node {node}: {e}",
                    self.slot
                )
            });
    }
}

/// The options of one cluster node; on loopback its bus gets a free port of its own (the
/// default, port + 10000, does not exist for ports above 55535, which `free_port` may give).
fn node_options(on_loopback: bool) -> ServerOptions {
    let args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &NODE_TIMEOUT.as_millis().to_string(),
        // A replica may always be promoted, however long it was cut off: failovers happen.
        "--cluster-replica-validity-factor",
        "0",
        // A replica shows in `CLUSTER SLOTS` once its offset is not 0, which without writes
        // takes the master's first ping (10 s by default).
        "--repl-ping-replica-period",
        "1",
        // Replicas stay with the master redis-cli gave them.
        "--cluster-allow-replica-migration",
        "no",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    ServerOptions {
        args,
        cluster_bus: on_loopback,
        ..Default::default()
    }
}

/// The address of the master serving `slot` in `ranges`.
fn owner(ranges: &[SlotRange], slot: u16) -> Option<&str> {
    ranges
        .iter()
        .find(|r| r.start <= slot && slot <= r.end)
        .map(|r| r.master.as_str())
}

/// Parses a `CLUSTER SLOTS` reply: `[start, end, [ip, port, id, ..], replicas..]` per range.
fn parse_slots(reply: redis::Value) -> Vec<SlotRange> {
    let int = |value: &redis::Value| match value {
        redis::Value::Int(n) => u16::try_from(*n).expect("a slot or port fits in u16"),
        other => panic!("unexpected number in CLUSTER SLOTS: {other:?}"),
    };
    let address = |node: &redis::Value| match node {
        redis::Value::Array(fields) => {
            let host = match fields.first() {
                Some(redis::Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                other => panic!("unexpected host in CLUSTER SLOTS: {other:?}"),
            };
            format!("{host}:{}", int(fields.get(1).expect("a node's port")))
        }
        other => panic!("unexpected node in CLUSTER SLOTS: {other:?}"),
    };
    let redis::Value::Array(ranges) = reply else {
        panic!("unexpected CLUSTER SLOTS reply: {reply:?}");
    };
    ranges
        .iter()
        .map(|range| match range {
            redis::Value::Array(items) if items.len() >= 3 => SlotRange {
                start: int(&items[0]),
                end: int(&items[1]),
                master: address(&items[2]),
                replicas: items[3..].iter().map(address).collect(),
            },
            other => panic!("unexpected CLUSTER SLOTS range: {other:?}"),
        })
        .collect()
}

/// Waits for `child` up to `limit`, reading its output; kills it (by its own pid) and panics
/// with the output so far if it takes longer.
fn wait_bounded(
    mut child: Child,
    limit: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let readers: Vec<std::thread::JoinHandle<String>> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut stream| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stream.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    })
    .collect();
    let collect = |readers: Vec<std::thread::JoinHandle<String>>| {
        readers
            .into_iter()
            .map(|reader| reader.join().expect("the output reader does not panic"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return (status, collect(readers));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {limit:?}:\n{}", collect(readers));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The conformance suite's environment on a cluster of its own: three masters, no replicas.
pub struct ClusterEnv {
    pub setup: ClusterSetup,
    pub backend: dlocks::redis::RedisBackend,
}

impl ClusterEnv {
    /// Starts a 3-master cluster and connects a backend through one of its nodes.
    pub fn start() -> Self {
        let setup = ClusterSetup::start(3, 0);
        let backend = setup.backend();
        ClusterEnv { setup, backend }
    }
}

impl ClusterSetup {
    /// A backend for this cluster, given one node (it finds the others).
    pub fn backend(&self) -> dlocks::redis::RedisBackend {
        self.backend_builder()
            .build()
            .expect("connect to the cluster")
    }

    /// A backend builder for this cluster with test timeouts.
    pub fn backend_builder(&self) -> dlocks::redis::RedisBackendBuilder {
        dlocks::redis::RedisBackend::cluster_builder(&self.urls()[..1])
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
    }
}

impl super::env::TestEnv for ClusterEnv {
    fn name(&self) -> &'static str {
        "redis cluster (3 masters)"
    }

    fn unit(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn backend(&self) -> std::sync::Arc<dyn dlocks::backend::DistributedLock> {
        std::sync::Arc::new(self.backend.clone())
    }
}
