//! A private network for one test's servers, whose links can be cut: each node in a network
//! namespace of its own, joined to the test's process by a bridge, with nftables rules in the
//! nodes' namespaces that drop packets silently (connections time out, as across a real
//! partition; a link set down would fail them at once).
//!
//! The test's own process (the clients) stays in its namespace and reaches the nodes through
//! the bridge. A partition between nodes drops the packets each side sends the other (both
//! ways, or one way); a node cut from the clients drops what it sends to them and what they
//! send it. Healing flushes the rules. The namespaces, the bridge and the rules go with the
//! [`Network`] when it is dropped, also when the test panics.
//!
//! Needs root (`ip netns`, nftables from Debian's `nftables`): [`Network::create`] says why it
//! could not make one, and the test fails; it is never skipped.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Which of the process's 16 parts of its subnet a network of this process has now: a network
/// takes a free one, and gives it back when dropped.
static IN_USE: Mutex<[bool; 16]> = Mutex::new([false; 16]);

/// Networks made by this process so far, for their names.
static NAMED: AtomicU32 = AtomicU32::new(0);

/// Nodes a network may have.
const MAX_NODES: usize = 8;

/// A network of nodes, each in a namespace of its own, owned by one test.
pub struct Network {
    /// Its part of the process's subnet (see `IN_USE`).
    part: usize,
    bridge: String,
    bridge_address: Ipv4Addr,
    nodes: Vec<Node>,
}

/// One node: its namespace and its address.
#[derive(Clone, Debug)]
pub struct Node {
    namespace: String,
    address: Ipv4Addr,
}

impl Node {
    /// The node's address (a server in it listens there).
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// `program` to be run inside the node's namespace (`ip netns exec`: the process started
    /// is `program` itself, with its own pid).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace, program])
            .stdin(Stdio::null());
        command
    }

    /// Runs `nft` with `args` in the node's namespace.
    fn nft(&self, args: &str) -> Result<(), String> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.namespace, "nft"])
            .arg(args))
    }
}

impl Network {
    /// `nodes` nodes (at most 8) on a bridge of their own, every link up.
    pub fn create(nodes: usize) -> Result<Network, String> {
        assert!(
            (1..=MAX_NODES).contains(&nodes),
            "1 to {MAX_NODES} nodes, not {nodes}"
        );
        let pid = std::process::id();
        let part = {
            let mut in_use = IN_USE
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let free = in_use
                .iter()
                .position(|used| !used)
                .ok_or("this process has 16 networks already")?;
            in_use[free] = true;
            free
        };
        // Names are never reused in a process: the kernel removes a deleted namespace, and
        // the veth pair in it, a moment after `ip netns del` returns.
        let made = NAMED.fetch_add(1, Ordering::Relaxed) % 1000;
        // 10.<pid's second byte>.<pid's low byte>.0/24 for this process; each network a /28
        // block of it (nodes from its first address, the bridge at its last but one).
        let [_, _, high, low] = pid.to_be_bytes();
        let base = (part * 16) as u8;
        let subnet = |host: u8| Ipv4Addr::new(10, high, low, base + host);
        let mut network = Network {
            part,
            bridge: format!("dk{pid}b{made}"),
            bridge_address: subnet(14),
            nodes: Vec::new(),
        };
        run(Command::new("ip").args(["link", "add", &network.bridge, "type", "bridge"]))
            .map_err(|error| format!("{error} (a network of namespaces needs root)"))?;
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("{}/28", network.bridge_address),
            "dev",
            &network.bridge,
        ]))?;
        run(Command::new("ip").args(["link", "set", &network.bridge, "up"]))?;
        for at in 0..nodes {
            let namespace = format!("dlock-{pid}-{made}-{at}");
            run(Command::new("ip").args(["netns", "add", &namespace]))?;
            let node = Node {
                namespace,
                address: subnet(at as u8 + 1),
            };
            // Pushed at once: dropping the network removes what was made, also on an error.
            network.nodes.push(node);
            let node = &network.nodes[at];
            let (outside, inside) = (format!("dk{pid}v{made}{at}"), format!("dk{pid}i{made}{at}"));
            run(Command::new("ip").args([
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ]))?;
            run(Command::new("ip").args(["link", "set", &inside, "netns", &node.namespace]))?;
            run(Command::new("ip").args(["link", "set", &outside, "master", &network.bridge]))?;
            run(Command::new("ip").args(["link", "set", &outside, "up"]))?;
            let ns = ["-n", node.namespace.as_str()];
            run(Command::new("ip").args(ns).args([
                "addr",
                "add",
                &format!("{}/28", node.address),
                "dev",
                &inside,
            ]))?;
            run(Command::new("ip")
                .args(ns)
                .args(["link", "set", &inside, "up"]))?;
            run(Command::new("ip")
                .args(ns)
                .args(["link", "set", "lo", "up"]))?;
            node.nft("add table inet dlock")
                .map_err(|error| format!("{error} (install Debian's nftables)"))?;
            node.nft("add chain inet dlock out { type filter hook output priority 0; }")?;
            node.nft("add chain inet dlock in { type filter hook input priority 0; }")?;
        }
        Ok(network)
    }

    /// Node `at`.
    pub fn node(&self, at: usize) -> &Node {
        &self.nodes[at]
    }

    /// Drops what nodes `from` send nodes `to`, and when `both_ways` what `to` send `from`.
    pub fn cut(&self, from: &[usize], to: &[usize], both_ways: bool) -> Result<(), String> {
        for &a in from {
            for &b in to {
                self.drop_sent(a, self.nodes[b].address)?;
                if both_ways {
                    self.drop_sent(b, self.nodes[a].address)?;
                }
            }
        }
        Ok(())
    }

    /// Cuts `nodes` from every other node, both ways.
    pub fn isolate(&self, nodes: &[usize]) -> Result<(), String> {
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|at| !nodes.contains(at))
            .collect();
        self.cut(nodes, &others, true)
    }

    /// Cuts `nodes` from the test's own process (the clients), both ways.
    pub fn cut_from_clients(&self, nodes: &[usize]) -> Result<(), String> {
        for &at in nodes {
            self.drop_sent(at, self.bridge_address)?;
            self.nodes[at].nft(&format!(
                "add rule inet dlock in ip saddr {} drop",
                self.bridge_address
            ))?;
        }
        Ok(())
    }

    /// Drops what `nodes` send the test's own process (the clients): their requests arrive,
    /// their answers do not.
    pub fn cut_to_clients(&self, nodes: &[usize]) -> Result<(), String> {
        for &at in nodes {
            self.drop_sent(at, self.bridge_address)?;
        }
        Ok(())
    }

    /// Every link up again.
    pub fn heal(&self) -> Result<(), String> {
        for node in &self.nodes {
            node.nft("flush chain inet dlock out")?;
            node.nft("flush chain inet dlock in")?;
        }
        Ok(())
    }

    /// Node `at` drops what it sends to `peer`.
    fn drop_sent(&self, at: usize, peer: Ipv4Addr) -> Result<(), String> {
        self.nodes[at].nft(&format!("add rule inet dlock out ip daddr {peer} drop"))
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the other end.
        for node in &self.nodes {
            let _ = run(Command::new("ip").args(["netns", "del", &node.namespace]));
        }
        let _ = run(Command::new("ip").args(["link", "del", &self.bridge]));
        let mut in_use = IN_USE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        in_use[self.part] = false;
    }
}

/// Runs `command` to its end: an error with what it printed if it failed.
fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("could not run {command:?}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
