//! Starts and stops real etcd members for tests: one member, or a cluster of three with short
//! election timeouts, each on free loopback ports with its data in a temporary directory.
//! A member can be killed, paused (`SIGSTOP`), resumed and restarted on its data, each by its
//! own pid; every member is stopped when its cluster is dropped, also when the test panics.

use crate::ports::free_port;
use crate::signals::{signal, stop};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::etcd::{EtcdBackend, EtcdBackendBuilder};

use super::env::TestEnv;
use crate::network::Network;

mod server_env;

/// How long a cluster may take to elect a leader after it was started.
const STARTUP_LIMIT: Duration = Duration::from_secs(20);

/// The `etcd` program: Debian's `etcd-server` puts it on the PATH.
const ETCD: &str = "etcd";

/// One `etcd` process of a cluster.
pub struct EtcdMember {
    pub name: String,
    /// The address it listens on: 127.0.0.1, or its node's in a [`Network`].
    pub host: Ipv4Addr,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl EtcdMember {
    /// `http://<host>:<client port>`.
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://{}:{}", self.host, self.peer_port)
    }

    /// The member's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A cluster of etcd members (one, or three) owned by a test.
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    dir: PathBuf,
    token: String,
    /// The members' raft heartbeat interval and election timeout.
    timing: RaftTiming,
    /// The members' own network, whose links a test cuts, when it has one (member `i` on node
    /// `i`); dropped after the members are stopped.
    network: Option<Network>,
}

/// A member's raft heartbeat interval and election timeout.
#[derive(Clone, Copy)]
struct RaftTiming {
    heartbeat: Duration,
    election: Duration,
}

impl RaftTiming {
    /// A leader elected within a few hundred milliseconds of losing one. The heartbeat is a
    /// fifth of the election timeout (the least etcd takes), not a tenth: three idle members
    /// beating every 20 ms kept a fifth of a CPU busy (1.84 CPU-s in 10 s), every 50 ms half
    /// that, and the suite runs minutes of them on two CPUs.
    const QUICK: RaftTiming = RaftTiming {
        heartbeat: Duration::from_millis(50),
        election: Duration::from_millis(250),
    };
}

impl EtcdCluster {
    /// One member.
    pub fn single() -> Self {
        Self::start(1)
    }

    /// One member that grants no lease shorter than about `shortest` (etcd's least TTL is one
    /// and a half election timeouts): a key on a lease asked for a second outlives the hold
    /// it stood for by seconds, not by less than one, however long the machine stalls.
    pub fn single_with_shortest_lease(shortest: Duration) -> Self {
        let election = shortest * 2 / 3;
        let timing = RaftTiming {
            heartbeat: election / 10,
            election,
        };
        Self::start_on(1, None, timing)
    }

    /// `size` members that elect a leader within a few hundred milliseconds of losing one.
    /// Panics (the test fails, never skips) if etcd is not installed or does not come up.
    pub fn start(size: usize) -> Self {
        Self::start_on(size, None, RaftTiming::QUICK)
    }

    /// `size` members, each in a network namespace of its own on a [`Network`] whose links
    /// [`network`](Self::network) cuts. Panics (the test fails, never skips) if the network
    /// cannot be made (it needs root).
    pub fn start_partitionable(size: usize) -> Self {
        let network = Network::create(size)
            .unwrap_or_else(|error| panic!("no network of namespaces for etcd: {error}"));
        Self::start_on(size, Some(network), RaftTiming::QUICK)
    }

    fn start_on(size: usize, mut network: Option<Network>, timing: RaftTiming) -> Self {
        for _ in 0..5 {
            let dir = std::env::temp_dir().join(format!(
                "dlock-etcd-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&dir).expect("create the cluster's temp dir");
            let members = (0..size)
                .map(|i| EtcdMember {
                    name: format!("m{i}"),
                    host: network
                        .as_ref()
                        .map_or(Ipv4Addr::LOCALHOST, |network| network.node(i).address()),
                    client_port: free_port(),
                    peer_port: free_port(),
                    child: None,
                    dir: dir.join(format!("m{i}")),
                })
                .collect();
            let mut cluster = EtcdCluster {
                members,
                dir,
                token: uuid::Uuid::new_v4().to_string(),
                timing,
                network: network.take(),
            };
            let started = (0..size).all(|i| cluster.spawn(i, "new"));
            if started && cluster.await_whole(STARTUP_LIMIT) {
                return cluster;
            }
            eprintln!("etcd did not start (ports taken?); trying again on other ports");
            network = cluster.network.take();
        }
        panic!("etcd did not start after 5 attempts (is Debian's etcd-server installed? scripts/test-all.sh installs it)");
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `at`; false if it exited at once.
    fn spawn(&mut self, at: usize, state: &str) -> bool {
        let initial = self.initial_cluster();
        let mut command = match &self.network {
            Some(network) => network.node(at).command(ETCD),
            None => Command::new(ETCD),
        };
        let member = &mut self.members[at];
        std::fs::create_dir_all(&member.dir).expect("create the member's dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(member.dir.with_extension("log"))
            .expect("create the member's log");
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .args(["--listen-client-urls", &member.url()])
            .args(["--advertise-client-urls", &member.url()])
            .args(["--listen-peer-urls", &member.peer_url()])
            .args(["--initial-advertise-peer-urls", &member.peer_url()])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            .arg("--heartbeat-interval")
            .arg(self.timing.heartbeat.as_millis().to_string())
            .arg("--election-timeout")
            .arg(self.timing.election.as_millis().to_string())
            .args(["--unsafe-no-fsync", "--snapshot-count", "10000"])
            // A collector that runs a quarter as often: a member lives for seconds to minutes,
            // and the suite runs many side by side on two CPUs. (One Go thread as well used a
            // sixth less CPU, but a member serving requests on it then missed its 200 ms
            // election timeout under the run's load: holds on three members were lost.)
            .env("GOGC", "400")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => panic!(
                "could not start etcd ({error}): install Debian's etcd-server (scripts/test-all.sh does)"
            ),
        };
        member.child = Some(child);
        std::thread::sleep(Duration::from_millis(50));
        match member.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => {
                eprintln!("etcd {} exited at start: {status}", member.name);
                member.child = None;
                false
            }
            _ => true,
        }
    }

    /// The members.
    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// The members' network (member `i` on node `i`), if the cluster was started on one
    /// ([`start_partitionable`](Self::start_partitionable)).
    pub fn network(&self) -> Option<&Network> {
        self.network.as_ref()
    }

    /// Every member's URL, separated by commas (etcdctl's `--endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(EtcdMember::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A backend on every member with bounded test timeouts.
    pub fn backend(&self) -> EtcdBackend {
        self.backend_builder()
            .build()
            .expect("connect to the test cluster")
    }

    /// A builder for a backend on every member with bounded test timeouts.
    pub fn backend_builder(&self) -> EtcdBackendBuilder {
        EtcdBackend::builder(&self.endpoints())
            .connect_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(2))
    }

    /// `etcdctl` against every member.
    pub fn etcdctl(&self) -> Command {
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints()))
            .arg("--dial-timeout=2s");
        command
    }

    /// The index of the member that leads, once one does (bounded by `limit`).
    pub fn await_leader(&self, limit: Duration) -> Option<usize> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(leader) = self.leader() {
                return Some(leader);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (up to `limit`) until every member runs and answers on its own ports, each a
    /// member of this cluster (one leader, as many distinct members as started); false if one
    /// exited or they never agree. A member that lost a port to another process (a free port
    /// taken between its pick and etcd's bind) exits, maybe after the others elected a leader
    /// without it, and what listens on that port then is not this cluster's: another test's
    /// member, or another member's peer port (which answers `/v3/kv/txn` with a 404).
    fn await_whole(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self.is_whole() {
                Some(true) => return true,
                Some(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return false,
            }
        }
    }

    /// `None` if a member exited; else whether every member answers, one leader for all.
    fn is_whole(&mut self) -> Option<bool> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for member in &mut self.members {
            let running = member
                .child
                .as_mut()
                .is_some_and(|child| matches!(child.try_wait(), Ok(None)));
            if !running {
                return None;
            }
            let Some(body) = post(
                member.host,
                member.client_port,
                "/v3/maintenance/status",
                "{}",
            ) else {
                return Some(false);
            };
            ids.push(field(&body, "member_id"));
            leaders.push(field(&body, "leader"));
        }
        ids.sort();
        ids.dedup();
        leaders.dedup();
        Some(ids.len() == self.members.len() && leaders.len() == 1 && ids.contains(&leaders[0]))
    }

    /// The index of the member that leads now, as the running members agree.
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        for member in &self.members {
            let status = member.child.as_ref().and_then(|_| {
                post(
                    member.host,
                    member.client_port,
                    "/v3/maintenance/status",
                    "{}",
                )
            });
            ids.push(status.map(|body| (field(&body, "member_id"), field(&body, "leader"))));
        }
        let (_, leader) = ids
            .iter()
            .flatten()
            .find(|(_, leader)| !leader.is_empty())?;
        ids.iter()
            .position(|found| found.as_ref().is_some_and(|(id, _)| id == leader))
    }

    /// Kills member `at` (`SIGKILL`).
    pub fn kill(&mut self, at: usize) {
        if let Some(mut child) = self.members[at].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops member `at` (`SIGSTOP`): its connections stay open, nothing is answered.
    pub fn pause(&self, at: usize) {
        if let Some(pid) = self.members[at].pid() {
            stop(pid);
        }
    }

    /// Lets a paused member go on (`SIGCONT`).
    pub fn resume(&self, at: usize) {
        if let Some(pid) = self.members[at].pid() {
            signal(pid, "-CONT");
        }
    }

    /// Kills member `at` if it runs and starts it again on its data and ports.
    pub fn restart(&mut self, at: usize) {
        self.kill(at);
        let deadline = Instant::now() + STARTUP_LIMIT;
        while !self.spawn(at, "existing") {
            assert!(Instant::now() < deadline, "etcd did not restart");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for at in 0..self.members.len() {
            // A paused member is killed all the same.
            self.kill(at);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `POST path` with `body` to a member, without dlock: its whole answer (head and body), if it
/// answered 200 within a second.
fn post(host: Ipv4Addr, port: u16, path: &str, body: &str) -> Option<String> {
    let address = SocketAddr::from((host, port));
    let mut tcp = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    tcp.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).ok()?;
    answer.starts_with("HTTP/1.1 200").then_some(answer)
}

/// The body of `answer` (what [`post`] answered), its chunks joined.
fn body_of(answer: &str) -> String {
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        return String::new();
    };
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_owned();
    }
    let mut joined = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        joined.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    joined
}

/// The string value of `"name":"..."` in a JSON text.
fn field(body: &str, name: &str) -> String {
    let needle = format!("\"{name}\":\"");
    body.find(&needle)
        .map(|at| {
            let rest = &body[at + needle.len()..];
            rest[..rest.find('"').unwrap_or(0)].to_owned()
        })
        .unwrap_or_default()
}

/// The conformance suite's environment on an etcd cluster of its own.
pub struct EtcdEnv {
    pub cluster: EtcdCluster,
    pub backend: EtcdBackend,
}

impl EtcdEnv {
    /// One member.
    pub fn single() -> Self {
        Self::on(EtcdCluster::single())
    }

    /// Three members. Their backend waits up to 5 s for an answer, not 2: a write is
    /// answered once a majority has it, and beside the suite's CPU-bound tests on two cores a
    /// member has taken over 2 s to answer one of the thousands of steps of
    /// `many_threads_on_thousands_of_names` (`Unavailable`, one CI run in ten). The suite
    /// checks what the locks do, not how fast a starved cluster answers.
    pub fn three() -> Self {
        let cluster = EtcdCluster::start(3);
        let backend = cluster
            .backend_builder()
            .request_timeout(Duration::from_secs(5))
            .build()
            .expect("connect to the test cluster");
        EtcdEnv { cluster, backend }
    }

    fn on(cluster: EtcdCluster) -> Self {
        let backend = cluster.backend();
        EtcdEnv { cluster, backend }
    }
}

impl TestEnv for EtcdEnv {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn unit(&self) -> Duration {
        // etcd's leases are whole seconds, and it ends expired ones every half second; but the
        // clients of a test share one backend, which ends its own holds at their deadlines
        // (the step that meets a hold that is over deletes it), so leases need not be whole
        // seconds here. Half a second keeps the leases' multiples the suite uses (a third, a
        // fifth) well above a request's time on a busy machine.
        Duration::from_millis(500)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }
}
