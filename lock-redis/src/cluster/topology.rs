//! Which master serves each slot and how many replicas it has, read with `CLUSTER SLOTS`.
//!
//! The cluster client routes commands itself; dlock reads the map too for what that client does
//! not do: subscribing to a sharded channel on the node that owns its slot, and knowing how many
//! replicas a master's `WAIT` can count on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use redis::cluster::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisResult, Value};

use dlock_core::LockError;

use super::ClusterConnector;
use crate::commands::{Commands, Retry};

/// The number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first `{`
/// and the next `}`, if not empty) or of the whole key, modulo 16384.
pub(crate) fn key_slot(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key.as_bytes())) % SLOTS
}

fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&byte| byte == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&byte| byte == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// A master node's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Node {
    pub(crate) host: Arc<str>,
    pub(crate) port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One range of slots and the master serving it.
#[derive(Debug, Clone)]
struct SlotRange {
    first: u16,
    last: u16,
    master: Node,
    replicas: u32,
}

/// The slot map as one node told it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Topology {
    ranges: Vec<SlotRange>,
}

impl Topology {
    /// Reads `CLUSTER SLOTS` from some node of `con`, trying another one if it fails.
    fn read(con: &mut ClusterConnection) -> RedisResult<Topology> {
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        let mut last = None;
        for _ in 0..3 {
            match con.route_command(&cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random)) {
                Ok(value) => return Ok(Topology::parse(&value)),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "no node answered CLUSTER SLOTS"))
        }))
    }

    /// Reads `CLUSTER SLOTS` from the one node `con` is connected to.
    pub(crate) fn read_from(con: &mut impl redis::ConnectionLike) -> RedisResult<Topology> {
        let value: Value = redis::cmd("CLUSTER").arg("SLOTS").query(con)?;
        Ok(Topology::parse(&value))
    }

    /// `CLUSTER SLOTS`: `[[first, last, [host, port, id, ..], [replica..]..], ..]`; entries
    /// that do not parse are left out (their slots then have no known master).
    fn parse(value: &Value) -> Topology {
        let Value::Array(entries) = value else {
            return Topology::default();
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(items) = entry else { continue };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(master)) =
                (items.first(), items.get(1), items.get(2).and_then(node))
            else {
                continue;
            };
            ranges.push(SlotRange {
                first: u16::try_from(*first).unwrap_or(SLOTS),
                last: u16::try_from(*last).unwrap_or(SLOTS),
                master,
                replicas: u32::try_from(items.len().saturating_sub(3)).unwrap_or(u32::MAX),
            });
        }
        Topology { ranges }
    }

    fn range(&self, slot: u16) -> Option<&SlotRange> {
        self.ranges
            .iter()
            .find(|range| (range.first..=range.last).contains(&slot))
    }

    /// The master serving `slot`, if the map knows one.
    pub(crate) fn master_of(&self, slot: u16) -> Option<&Node> {
        self.range(slot).map(|range| &range.master)
    }

    /// How many replicas the master of `slot` has (the failed ones are not listed).
    pub(crate) fn replicas_of(&self, slot: u16) -> u32 {
        self.range(slot).map_or(0, |range| range.replicas)
    }

    /// Every master serving some slot.
    pub(crate) fn masters(&self) -> Vec<Node> {
        let mut masters: Vec<Node> = Vec::new();
        for range in &self.ranges {
            if !masters.contains(&range.master) {
                masters.push(range.master.clone());
            }
        }
        masters
    }

    /// The fewest replicas a master has.
    pub(crate) fn fewest_replicas(&self) -> u32 {
        self.ranges
            .iter()
            .map(|range| range.replicas)
            .min()
            .unwrap_or(0)
    }

    /// Whether `node` serves some slot.
    pub(crate) fn is_master(&self, node: &Node) -> bool {
        self.ranges.iter().any(|range| &range.master == node)
    }
}

/// `[host, port, ..]` as a node.
fn node(value: &Value) -> Option<Node> {
    let Value::Array(items) = value else {
        return None;
    };
    let host = match items.first()? {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    let Value::Int(port) = items.get(1)? else {
        return None;
    };
    if host.is_empty() {
        return None;
    }
    Some(Node {
        host: host.into(),
        port: u16::try_from(*port).ok()?,
    })
}

/// The backend's copy of the slot map, read again when it is older than asked for or when
/// something showed it stale (a moved channel, a node gone).
///
/// The copy's lock is never held across a read: a read that waits for a silent node holds up
/// only the threads that need the new map (one read at a time, under `reading`), never a step
/// that can do with the one it has.
pub(crate) struct SlotMap {
    commands: Commands<ClusterConnector>,
    state: Mutex<MapState>,
    reading: Mutex<()>,
}

struct MapState {
    topology: Arc<Topology>,
    read_at: Option<Instant>,
}

/// The shortest time between two reads of the map: a storm of moved channels reads it once.
const MIN_REREAD: Duration = Duration::from_millis(100);

impl SlotMap {
    pub(crate) fn new(commands: Commands<ClusterConnector>, topology: Topology) -> Self {
        SlotMap {
            commands,
            state: Mutex::new(MapState {
                topology: Arc::new(topology),
                read_at: Some(Instant::now()),
            }),
            reading: Mutex::new(()),
        }
    }

    /// Reads `CLUSTER SLOTS` through `con` (when the backend connects).
    pub(crate) fn read_with(con: &mut ClusterConnection) -> RedisResult<Topology> {
        Topology::read(con)
    }

    /// The map, read again first if it is older than `max_age` (or marked stale).
    pub(crate) fn current(&self, max_age: Duration) -> Result<Arc<Topology>, LockError> {
        if let Some(fresh) = self.fresh(max_age) {
            return Ok(fresh);
        }
        let _reading = self.reading.lock();
        // Another thread may have read it meanwhile.
        if let Some(fresh) = self.fresh(max_age) {
            return Ok(fresh);
        }
        let topology = self.commands.run_with(
            "reading the cluster's slot map",
            Retry::OnDroppedConnection,
            |con| Topology::read(&mut con.con),
        )?;
        Ok(self.store(topology))
    }

    /// The map, if it was read less than `max_age` ago and nothing showed it stale since.
    pub(crate) fn fresh(&self, max_age: Duration) -> Option<Arc<Topology>> {
        let state = self.state.lock();
        state
            .read_at
            .is_some_and(|at| at.elapsed() < max_age.max(MIN_REREAD))
            .then(|| state.topology.clone())
    }

    /// The right to read the map, waited for until `deadline` at most (another thread may be
    /// reading it).
    pub(crate) fn reading_until(&self, deadline: Instant) -> Option<MutexGuard<'_, ()>> {
        self.reading.try_lock_until(deadline)
    }

    /// Keeps a map just read.
    pub(crate) fn store(&self, topology: Topology) -> Arc<Topology> {
        let mut state = self.state.lock();
        state.topology = Arc::new(topology);
        state.read_at = Some(Instant::now());
        state.topology.clone()
    }

    /// The map as last read, without asking the cluster.
    pub(crate) fn cached(&self) -> Arc<Topology> {
        self.state.lock().topology.clone()
    }

    /// Something showed the map out of date: the next [`current`](Self::current) reads it.
    pub(crate) fn mark_stale(&self) {
        self.state.lock().read_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::key_slot;

    #[test]
    fn slots_match_redis() {
        // CLUSTER KEYSLOT on a Redis 7 node.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("nothere"), 12731);
        assert_eq!(key_slot("{foo}.bar"), 12182);
        assert_eq!(key_slot("redisson_lock__channel:{foo}"), 12182);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
    }
}
