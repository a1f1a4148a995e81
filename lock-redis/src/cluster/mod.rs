//! Redis Cluster: commands through the `redis` crate's cluster client (slot routing, `MOVED` and
//! `ASK` redirects), pooled like single-server connections; sharded pub/sub on the node that
//! owns each channel's slot; and the slot map dlock reads itself for what the crate's blocking
//! client leaves out (sharded subscriptions and each master's replica count for `WAIT`).

mod batch;
mod connector;
mod pipelines;
mod pubsub;
mod topology;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use redis::cluster::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use dlock_core::LockError;

use crate::batch::BatchReply;
use crate::commands::{Commands, Retry};
use crate::config::Settings;
use crate::connection::{Connector, Endpoint};
use crate::error::to_lock_error;
use crate::inspect;
use crate::layout::ScriptCall;
use crate::replica_sync::{Ack, ReplicaSync};

pub(crate) use connector::{ClusterConnector, PooledCluster};
use pipelines::{call_slot, worse};
use pubsub::ClusterPubSub;
pub(crate) use topology::key_slot;
use topology::{Node, SlotMap, Topology};

/// A backend's cluster: the cluster client's pool, the slot map, a pool per master for the
/// steps' pipelines, and the sharded pub/sub connections.
pub(crate) struct Cluster {
    pub(crate) commands: Commands<ClusterConnector>,
    map: Arc<SlotMap>,
    masters: Mutex<HashMap<Node, Arc<Master>>>,
    pub(crate) pubsub: ClusterPubSub,
    settings: Settings,
    /// A seed's connection settings (credentials, TLS), for connections to other nodes.
    seed: ConnectionInfo,
}

/// One master's pool and replica acknowledgement: a step's calls for that master go there as
/// one pipeline, its `WAIT` at the end, exactly as on a single server.
struct Master {
    commands: Commands,
    replica_sync: ReplicaSync,
    /// When its last step failed for want of an answer (`None` once it answers again): the
    /// slot map is read from the masters that answer first.
    failed_at: Mutex<Option<Instant>>,
}

impl Master {
    /// Records whether the master answered a step.
    fn answered(&self, answered: bool) {
        let mut failed_at = self.failed_at.lock();
        match (answered, *failed_at) {
            (true, _) => *failed_at = None,
            (false, None) => *failed_at = Some(Instant::now()),
            (false, Some(_)) => {}
        }
    }
}

impl Cluster {
    /// Connects to the cluster of `urls`, checking that it answers and serves every slot.
    pub(crate) fn connect(
        settings: &Settings,
        urls: &[String],
        id: &str,
    ) -> Result<Cluster, LockError> {
        let connector = ClusterConnector::new(settings, urls)?;
        let describe = connector.endpoint.describe();
        let mut con = connector
            .open()
            .map_err(|error| to_lock_error(error, "connecting", &describe))?;
        let topology = SlotMap::read_with(&mut con).map_err(|error| {
            to_lock_error(error, "reading the slot map (CLUSTER SLOTS)", &describe)
        })?;
        let uncovered = (0..topology::SLOTS).find(|slot| topology.master_of(*slot).is_none());
        if let Some(slot) = uncovered {
            return Err(LockError::unavailable(
                format!("{describe} serves no slot {slot} (CLUSTER SLOTS)"),
                "the cluster is not fully set up, or a failover is under way",
            ));
        }
        check_sharded_pubsub(&mut con, &topology, &describe)?;
        drop(con);
        let seed = urls
            .first()
            .map(|url| url.as_str().into_connection_info())
            .transpose()
            .map_err(|error| LockError::config(format!("invalid Redis Cluster node URL: {error}")))?
            .ok_or_else(|| LockError::config("at least one Redis Cluster node URL is needed"))?;
        let commands = Commands::new(settings, connector);
        let map = Arc::new(SlotMap::new(commands.clone(), topology));
        let pubsub = ClusterPubSub::new(
            map.clone(),
            commands.clone(),
            settings.clone(),
            seed.clone(),
            id,
        );
        Ok(Cluster {
            commands,
            map,
            masters: Mutex::new(HashMap::new()),
            pubsub,
            settings: settings.clone(),
            seed,
        })
    }

    /// The pool of `node`, opened at its first use.
    fn master(&self, node: &Node) -> Result<Arc<Master>, LockError> {
        let mut masters = self.masters.lock();
        if let Some(master) = masters.get(node) {
            return Ok(master.clone());
        }
        let connector = Connector::commands_to(&self.settings, node_info(&self.seed, node))?;
        let replica_sync = if self.settings.replica_sync {
            ReplicaSync::waiting(self.settings.replica_sync_timeout)
        } else {
            ReplicaSync::off()
        };
        let master = Arc::new(Master {
            commands: Commands::new(&self.settings, connector),
            replica_sync,
            failed_at: Mutex::new(None),
        });
        masters.insert(node.clone(), master.clone());
        Ok(master)
    }

    /// The slot map to place a step's calls by: the one kept, or, when it is stale, the map
    /// read again from the masters, those that answered their last step first, until
    /// `deadline`. A map that cannot be read again by then (the masters asked are silent, or
    /// another thread is still reading) is the best knowledge there is: a master that moved
    /// answers MOVED, and is followed.
    fn placement(&self, what: &str, deadline: Instant) -> Arc<Topology> {
        if let Some(fresh) = self.map.fresh(PLACEMENT_MAP_AGE) {
            return fresh;
        }
        let Some(_reading) = self.map.reading_until(deadline) else {
            return self.map.cached();
        };
        if let Some(fresh) = self.map.fresh(PLACEMENT_MAP_AGE) {
            return fresh;
        }
        let cached = self.map.cached();
        let mut masters: Vec<(Option<Instant>, Node, Arc<Master>)> = cached
            .masters()
            .into_iter()
            .filter_map(|node| {
                let master = self.master(&node).ok()?;
                let failed_at = *master.failed_at.lock();
                Some((failed_at, node, master))
            })
            .collect();
        // Masters that answered first, then the longest silent.
        masters.sort_by_key(|(failed_at, _, _)| (failed_at.is_some(), *failed_at));
        for (_, node, master) in masters {
            if Instant::now() >= deadline {
                break;
            }
            let read = master.commands.run_by(
                "reading the cluster's slot map",
                deadline,
                Topology::read_from,
            );
            master.answered(!matches!(&read, Err(error) if error.is_unavailable()));
            match read {
                Ok(topology) if topology.masters().is_empty() => {}
                Ok(topology) => return self.map.store(topology),
                Err(error) => {
                    tracing::debug!(%error, master = %node, what, "the slot map could not be read from a master")
                }
            }
        }
        tracing::debug!(
            what,
            "the slot map could not be read again in time; the last one is used"
        );
        cached
    }

    /// Sends again, through the cluster client, the calls of `part` their master could not
    /// serve, and waits for the replicas where they went.
    fn redirect(
        &self,
        what: &str,
        group: &[&ScriptCall],
        part: &mut BatchReply,
        replicated: bool,
        response_timeout: Duration,
    ) -> Result<(), LockError> {
        let moved: Vec<usize> = (0..group.len())
            .filter(|&index| batch::is_transient(&part.replies[index]))
            .collect();
        if moved.is_empty() {
            return Ok(());
        }
        self.map.mark_stale();
        let deadline = Instant::now() + response_timeout;
        let wait = self
            .settings
            .replica_sync
            .then_some(self.settings.replica_sync_timeout)
            .filter(|_| replicated);
        let ack = self
            .commands
            .run_with(what, Retry::OnDroppedConnection, |con| {
                let mut ack = Ack::NotNeeded;
                for &index in &moved {
                    part.replies[index] = batch::resend(con, group[index], deadline)?;
                }
                if let Some(timeout) = wait {
                    // The calls' new master, and its replicas, from the map the client now has.
                    let slot = call_slot(group[moved[0]]);
                    let topology = self.map.cached();
                    let replicas = topology.replicas_of(slot);
                    if replicas > 0 {
                        ack = batch::wait_on(con, slot, replicas, timeout)?;
                    }
                }
                Ok(ack)
            })?;
        part.ack = worse(part.ack.clone(), ack);
        Ok(())
    }

    /// The fewest replicas a master has, from the slot map as last read.
    pub(crate) fn fewest_replicas(&self) -> u32 {
        self.map.cached().fewest_replicas()
    }

    /// The names of the hashes matching `pattern` on every master (see [`inspect::scan`]),
    /// sorted, at most `limit`.
    /// The keys of Redis type `kind` matching `pattern` on every master, sorted, at most
    /// `limit`.
    pub(crate) fn scan_keys(
        &self,
        pattern: &str,
        kind: &str,
        limit: usize,
    ) -> Result<Vec<String>, LockError> {
        let topology = self.map.current(PLACEMENT_MAP_AGE)?;
        let mut names = Vec::new();
        for master in topology.masters() {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: master.host.to_string(),
                port: master.port,
            });
            names.extend(self.commands.run_with(
                "a lock scan",
                Retry::OnDroppedConnection,
                |con| {
                    inspect::scan_keys(
                        |cmd| con.con.route_command(cmd, routing.clone()),
                        pattern,
                        kind,
                        limit,
                    )
                },
            )?);
        }
        names.sort();
        names.truncate(limit);
        Ok(names)
    }
}

/// Checks that every master has sharded pub/sub (Redis 7.0+): the scripts announce releases
/// with `SPUBLISH`, which an older master refuses only after the release's `DEL`, and waiters
/// listen with `SSUBSCRIBE`. Asked with `COMMAND INFO SPUBLISH` (`+@connection` allows it).
fn check_sharded_pubsub(
    con: &mut ClusterConnection,
    topology: &topology::Topology,
    describe: &str,
) -> Result<(), LockError> {
    let what = "checking that the masters have sharded pub/sub (COMMAND INFO SPUBLISH)";
    for master in topology.masters() {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: master.host.to_string(),
            port: master.port,
        });
        let reply = con
            .route_command(redis::cmd("COMMAND").arg("INFO").arg("SPUBLISH"), routing)
            .map_err(|error| to_lock_error(error, what, describe))?;
        let known = knows_command(&reply).map_err(|problem| {
            LockError::protocol(format!(
                "{describe}: master {master} {problem} while {what}"
            ))
        })?;
        if !known {
            return Err(LockError::config(format!(
                "{describe}: master {master} has no SPUBLISH; locks on a Redis Cluster need \
                 Redis 7.0 or later on every master (releases are announced with sharded \
                 pub/sub, as Redisson does on Redis 7)"
            )));
        }
    }
    Ok(())
}

/// Whether a `COMMAND INFO <command>` reply describes the command: a server that lacks it
/// answers nil in its place. `Err` says what was unexpected.
fn knows_command(reply: &redis::Value) -> Result<bool, String> {
    use redis::Value;
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::Array(doc)) => Ok(!doc.is_empty()),
            Some(Value::Map(doc)) => Ok(!doc.is_empty()),
            Some(Value::Nil) | None => Ok(false),
            Some(other) => Err(format!("answered {other:?} for a command")),
        },
        other => Err(format!("answered {other:?}")),
    }
}

/// How old the slot map may be when it places a call or a channel: it is read again sooner
/// when a master redirects a call or a channel moves.
pub(crate) const PLACEMENT_MAP_AGE: Duration = Duration::from_secs(60);

/// The error of a step or subscription on a slot the map names no master for.
pub(crate) fn no_master(endpoint: &Endpoint, slot: u16) -> LockError {
    LockError::unavailable(
        format!(
            "no master of {} serves slot {slot} now",
            endpoint.describe()
        ),
        "the cluster's slot map has no master for it (a failover may be under way)",
    )
}

/// `seed`'s connection settings (credentials, TLS) for `node`.
pub(crate) fn node_info(seed: &ConnectionInfo, node: &Node) -> ConnectionInfo {
    let addr = match seed.addr() {
        #[cfg(feature = "tls")]
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: node.host.to_string(),
            port: node.port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(node.host.to_string(), node.port),
    };
    seed.clone().set_addr(addr)
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::knows_command;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn command_info_tells_a_known_command_from_a_missing_one() {
        // Redis 7.0: the command's description (name, arity, flags, keys, categories, ...).
        let redis_7 = Value::Array(vec![Value::Array(vec![
            text("spublish"),
            Value::Int(3),
            Value::Array(vec![
                Value::SimpleString("pubsub".into()),
                Value::SimpleString("loading".into()),
                Value::SimpleString("stale".into()),
                Value::SimpleString("fast".into()),
            ]),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
            Value::Array(vec![
                Value::SimpleString("@pubsub".into()),
                Value::SimpleString("@fast".into()),
            ]),
        ])]);
        assert_eq!(knows_command(&redis_7), Ok(true));
        // Redis 6.2 and older: nil in place of the unknown command.
        assert_eq!(knows_command(&Value::Array(vec![Value::Nil])), Ok(false));
        assert_eq!(knows_command(&Value::Array(Vec::new())), Ok(false));
        // RESP3 servers may describe it as a map.
        let map = Value::Array(vec![Value::Map(vec![(text("name"), text("spublish"))])]);
        assert_eq!(knows_command(&map), Ok(true));
        assert!(knows_command(&Value::Int(1)).is_err());
        assert!(knows_command(&Value::Array(vec![Value::Int(1)])).is_err());
    }
}
