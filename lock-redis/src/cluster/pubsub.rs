//! Wake-ups on a cluster: sharded pub/sub (`SSUBSCRIBE`), one connection per master, each lock's
//! channel subscribed on the master that owns its slot (as Redisson does on Redis 7). The
//! connections themselves are [`PubSub`]s; this module places channels on them and moves them
//! when their slot moves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::{ConnectionInfo, RedisError};

use dlock_core::backend::{ReleaseSubscription, Signal};
use dlock_core::LockError;

use super::topology::{key_slot, Node, SlotMap};
use super::{no_master, node_info, ClusterConnector, PLACEMENT_MAP_AGE};
use crate::commands::Commands;
use crate::config::Settings;
use crate::connection::Connector;
use crate::pubsub::{PubSub, Wiring, POKE};

/// The backend's pub/sub on a cluster.
pub(crate) struct ClusterPubSub {
    nodes: Mutex<HashMap<Node, Arc<PubSub>>>,
    map: Arc<SlotMap>,
    commands: Commands<ClusterConnector>,
    settings: Settings,
    /// A seed's connection settings (credentials, TLS), for connections to other nodes.
    seed: ConnectionInfo,
    backend_id: String,
}

impl ClusterPubSub {
    pub(crate) fn new(
        map: Arc<SlotMap>,
        commands: Commands<ClusterConnector>,
        settings: Settings,
        seed: ConnectionInfo,
        backend_id: &str,
    ) -> Self {
        ClusterPubSub {
            nodes: Mutex::new(HashMap::new()),
            map,
            commands,
            settings,
            seed,
            backend_id: backend_id.to_owned(),
        }
    }

    /// Subscribes `channel` on the master that owns its slot now; each message notifies the
    /// subscription's signal, and `forward` if given.
    ///
    /// A master that no longer owns the slot refuses the subscription, which comes back
    /// lapsed: while a slot moves, a node asked for the map may still place it on its old
    /// master. The map is read again and the subscription made again, a few times with growing
    /// pauses; one still lapsed after them is returned as it is (its waiter subscribes again).
    pub(crate) fn subscribe_with(
        &self,
        channel: String,
        forward: Option<Arc<Signal>>,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let mut pause = FIRST_PLACEMENT_PAUSE;
        loop {
            let subscription = self.subscribe_on_owner(channel.clone(), forward.clone())?;
            if !subscription.lapsed() || pause > LAST_PLACEMENT_PAUSE {
                return Ok(subscription);
            }
            drop(subscription);
            std::thread::sleep(pause);
            pause *= 2;
        }
    }

    /// Subscribes `channel` on the master the slot map names for it.
    fn subscribe_on_owner(
        &self,
        channel: String,
        forward: Option<Arc<Signal>>,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let slot = key_slot(&channel);
        let topology = self.map.current(PLACEMENT_MAP_AGE)?;
        let Some(node) = topology.master_of(slot).cloned() else {
            self.map.mark_stale();
            return Err(no_master(self.commands.endpoint(), slot));
        };
        let mut retired = Vec::new();
        let pubsub = {
            let mut nodes = self.nodes.lock();
            // Nodes that serve no slot any more go, once nobody listens through them.
            let gone: Vec<Node> = nodes
                .iter()
                .filter(|(node, pubsub)| !topology.is_master(node) && pubsub.is_unused())
                .map(|(node, _)| node.clone())
                .collect();
            retired.extend(gone.iter().filter_map(|node| nodes.remove(node)));
            match nodes.get(&node) {
                Some(pubsub) => pubsub.clone(),
                None => {
                    let pubsub = Arc::new(self.connect(&node)?);
                    nodes.insert(node, pubsub.clone());
                    pubsub
                }
            }
        };
        // Their threads are stopped and joined outside the lock: other waiters need not wait.
        drop(retired);
        pubsub.subscribe_with(channel, forward, None)
    }

    /// Whether this process listens on `channel` (through whichever master it subscribed on).
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.nodes
            .lock()
            .values()
            .any(|pubsub| pubsub.is_listening(channel))
    }

    fn connect(&self, node: &Node) -> Result<PubSub, LockError> {
        let connector = Connector::pubsub_to(&self.settings, node_info(&self.seed, node))?;
        let wiring = NodeWiring {
            node: node.clone(),
            map: self.map.clone(),
            commands: self.commands.clone(),
            backend_id: self.backend_id.clone(),
        };
        Ok(PubSub::wired(
            connector,
            Box::new(wiring),
            self.settings.unsubscribe_linger,
        ))
    }
}

/// The pause before placing a refused subscription again; it doubles up to
/// [`LAST_PLACEMENT_PAUSE`] (five tries over 150 ms in all).
const FIRST_PLACEMENT_PAUSE: Duration = Duration::from_millis(10);
const LAST_PLACEMENT_PAUSE: Duration = Duration::from_millis(80);

/// How the connection to one master is driven: sharded, woken by an `SPUBLISH` on a control
/// channel whose slot that master owns.
struct NodeWiring {
    node: Node,
    map: Arc<SlotMap>,
    commands: Commands<ClusterConnector>,
    backend_id: String,
}

/// How many control channel names are tried to find one in a node's slots: a master with a
/// thousandth of the slots has one within a few thousand tries.
const CONTROL_CANDIDATES: u32 = 100_000;

impl Wiring for NodeWiring {
    fn sharded(&self) -> bool {
        true
    }

    fn control(&self) -> Result<String, RedisError> {
        let topology = self.map.current(PLACEMENT_MAP_AGE).map_err(|error| {
            RedisError::from((
                redis::ErrorKind::Io,
                "reading the slot map",
                error.to_string(),
            ))
        })?;
        (0..CONTROL_CANDIDATES)
            .map(|n| format!("dlock:control:{{{}:{n}}}", self.backend_id))
            .find(|name| topology.master_of(key_slot(name)) == Some(&self.node))
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Client,
                    "the node serves no slot now",
                    self.node.to_string(),
                ))
            })
    }

    fn poke(&self, control: &str) -> Result<(), LockError> {
        // Routed by the channel's slot: to this node.
        self.commands
            .run("waking a pub/sub connection", |con| {
                redis::cmd("SPUBLISH")
                    .arg(control)
                    .arg(POKE)
                    .query::<i64>(&mut con.con)
            })
            .map(drop)
    }

    fn lapsed(&self) {
        self.map.mark_stale();
    }

    fn still_placed(&self, channel: &str) -> bool {
        // The node is unreachable: read the map again (at most every few tens of ms).
        self.map.mark_stale();
        match self.map.current(PLACEMENT_MAP_AGE) {
            Ok(topology) => topology.master_of(key_slot(channel)) == Some(&self.node),
            // No node answers: nothing shows the channel moved.
            Err(_) => true,
        }
    }
}
