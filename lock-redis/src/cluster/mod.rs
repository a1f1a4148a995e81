//! Redis Cluster: commands through the `redis` crate's cluster client (slot routing, `MOVED` and
//! `ASK` redirects), pooled like single-server connections; sharded pub/sub on the node that
//! owns each channel's slot; and the slot map dlock reads itself for what the crate's blocking
//! client leaves out (sharded subscriptions and each master's replica count for `WAIT`).

mod batch;
mod pubsub;
mod topology;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError};

use dlock_core::LockError;

use crate::batch::BatchReply;
use crate::commands::{Commands, Retry};
use crate::config::Settings;
use crate::connection::{redact_url, Connect, Connector, Endpoint, Pooled, PooledConnection};
use crate::error::to_lock_error;
use crate::inspect;
use crate::layout::ScriptCall;
use crate::replica_sync::{Ack, ReplicaSync};
use crate::scripts::Announce;

use pubsub::ClusterPubSub;
pub(crate) use topology::key_slot;
use topology::{Node, SlotMap, Topology};

/// How many times the cluster client follows a redirect (or reconnects a node) for one
/// command before giving up; dlock itself retries `TRYAGAIN` and `CLUSTERDOWN` until the
/// response timeout, so a long slot migration costs time, not an error.
const REDIRECTS: u32 = 3;

/// Opens cluster connections: each one knows the slot map and holds a connection to every node.
#[derive(Clone)]
pub(crate) struct ClusterConnector {
    client: ClusterClient,
    pub(crate) endpoint: Endpoint,
    /// How long a `WAIT` may block (zero when replica acknowledgement is off).
    replica_wait: Duration,
}

impl ClusterConnector {
    /// A connector to the cluster that `urls` (some of its nodes) belong to.
    pub(crate) fn new(settings: &Settings, urls: &[String]) -> Result<Self, LockError> {
        let mut infos = Vec::with_capacity(urls.len());
        for url in urls {
            let scheme = url.split_once("://").map(|(scheme, _)| scheme);
            if !matches!(scheme, Some("redis" | "rediss")) {
                return Err(LockError::config(format!(
                    "unsupported Redis Cluster node URL {:?}: expected redis://[user:password@]host:port \
                     or rediss://...",
                    redact_url(url)
                )));
            }
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|error| LockError::Config {
                    message: format!(
                        "invalid Redis Cluster node URL {:?}: {error}",
                        redact_url(url)
                    ),
                    source: Some(Box::new(error)),
                })?;
            infos.push(info);
        }
        let seeds: Vec<String> = infos.iter().map(|info| info.addr().to_string()).collect();
        let user = infos
            .first()
            .and_then(|info| info.redis_settings().username().map(Arc::from));
        let server: Arc<str> = seeds.join(", ").into();
        let builder = ClusterClientBuilder::new(infos)
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .tcp_settings(TcpSettings::default().set_nodelay(settings.tcp_nodelay))
            .retries(REDIRECTS)
            .min_retry_wait(10)
            .max_retry_wait(100);
        let client = with_certificates(builder, settings)
            .build()
            .map_err(|error| LockError::Config {
                message: format!(
                    "invalid Redis Cluster configuration ({server}): {error} (every node URL must \
                     use the same scheme, user and password)"
                ),
                source: Some(Box::new(error)),
            })?;
        Ok(ClusterConnector {
            client,
            endpoint: Endpoint::new("redis cluster", server, user, settings),
            replica_wait: if settings.replica_sync {
                settings.replica_sync_timeout
            } else {
                Duration::ZERO
            },
        })
    }

    /// Opens a cluster connection: it reads the slot map from the first seed that answers and
    /// connects to every node, each connect, read and write bounded by the timeouts.
    pub(crate) fn open(&self) -> Result<ClusterConnection, RedisError> {
        let con = self.client.get_connection()?;
        con.set_write_timeout(Some(self.endpoint.response_timeout))?;
        // A redirected step's WAIT may block that much longer than a reply takes.
        con.set_read_timeout(Some(self.endpoint.response_timeout + self.replica_wait))?;
        Ok(con)
    }
}

#[cfg(feature = "tls")]
fn with_certificates(builder: ClusterClientBuilder, settings: &Settings) -> ClusterClientBuilder {
    if settings.tls_root_certificate.is_none() && settings.tls_client_certificate.is_none() {
        return builder;
    }
    builder.certs(redis::TlsCertificates {
        client_tls: settings.tls_client_certificate.as_ref().map(|(cert, key)| {
            redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }
        }),
        root_cert: settings.tls_root_certificate.clone(),
    })
}

#[cfg(not(feature = "tls"))]
fn with_certificates(builder: ClusterClientBuilder, _settings: &Settings) -> ClusterClientBuilder {
    builder
}

impl Connect for ClusterConnector {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// A pooled cluster connection.
pub(crate) struct PooledCluster {
    pub(crate) con: ClusterConnection,
    epoch: u64,
    broken: bool,
}

impl Pooled for PooledCluster {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn broken(&mut self) -> &mut bool {
        &mut self.broken
    }
}

impl r2d2::ManageConnection for ClusterConnector {
    type Connection = PooledCluster;
    type Error = RedisError;

    fn connect(&self) -> Result<PooledCluster, RedisError> {
        let epoch = self.endpoint.current_epoch();
        Ok(PooledCluster {
            con: self.open()?,
            epoch,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut PooledCluster) -> Result<(), RedisError> {
        // Only used if checkout testing is turned on (it is off: it would cost round trips).
        let result = redis::cmd("PING").query::<String>(&mut conn.con);
        conn.note(&result);
        result.map(drop)
    }

    fn has_broken(&self, conn: &mut PooledCluster) -> bool {
        conn.broken || !redis::ConnectionLike::is_open(&conn.con)
    }
}

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

    /// Runs `calls`: each call's keys checked to share one slot first, then one pipeline per
    /// master (see [`crate::batch::run_batch`]), written to every master before any reply is
    /// read (no thread per master); calls a master could not serve are sent again through the
    /// cluster client (see [`batch`]). The replies come in the order of `calls`; the
    /// acknowledgement is the worst of the masters'.
    pub(crate) fn run_batch(
        &self,
        what: &str,
        calls: &[ScriptCall],
        retry: Retry,
        replicated: bool,
        response_timeout: Duration,
    ) -> Result<BatchReply, LockError> {
        let parts = self.run_batch_parts(what, calls, retry, replicated, response_timeout)?;
        if let Some(error) = parts.failed {
            return Err(error);
        }
        Ok(BatchReply {
            replies: parts.replies.into_iter().flatten().collect(),
            ack: parts.ack,
        })
    }

    /// As [`run_batch`](Self::run_batch), keeping each master's outcome to itself: the replies
    /// of the calls whose master answered, `None` for the others (with the first such master's
    /// error). A master that fails touches only the calls on it.
    pub(crate) fn run_batch_parts(
        &self,
        what: &str,
        calls: &[ScriptCall],
        retry: Retry,
        replicated: bool,
        response_timeout: Duration,
    ) -> Result<PartialReply, LockError> {
        for call in calls {
            check_one_slot(call)?;
        }
        // Reading the map again takes a share of the step's time, never more: one silent
        // master must not hold up the calls of the others.
        let map_deadline = Instant::now() + response_timeout;
        let topology = self.placement(what, map_deadline);
        // A master the map no longer names (failed over, or left) gives its pool up, which
        // would otherwise keep trying to reconnect to it.
        self.masters
            .lock()
            .retain(|node, _| topology.is_master(node));
        let mut groups: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut unplaced = None;
        for (index, call) in calls.iter().enumerate() {
            let slot = call_slot(call);
            let Some(master) = topology.master_of(slot) else {
                self.map.mark_stale();
                unplaced.get_or_insert(no_master(self.commands.endpoint(), slot));
                continue;
            };
            match groups.iter_mut().find(|(node, _)| node == master) {
                Some((_, members)) => members.push(index),
                None => groups.push((master.clone(), vec![index])),
            }
        }
        let plan_of = |master: &Master| {
            if replicated {
                master.replica_sync.plan()
            } else {
                ReplicaSync::off().plan()
            }
        };
        let batch_on = |master: &Master, con: &mut PooledConnection, group: &[&ScriptCall]| {
            crate::batch::run_batch(
                con,
                group,
                &master.replica_sync,
                plan_of(master),
                response_timeout,
                Announce::ShardedPublish,
            )
        };
        // `first`: the outcome of the attempt already made on a connection of `node`'s pool.
        let send =
            |node: &Node, group: &[&ScriptCall], first: Option<redis::RedisResult<BatchReply>>| {
                let master = self.master(node)?;
                let again = |con: &mut PooledConnection| batch_on(&master, con, group);
                match first {
                    Some(first) => master.commands.run_after(what, retry, first, again),
                    None => master.commands.run_with(what, retry, again),
                }
            };
        let run = |node: &Node, members: &[usize], first| {
            let group: Vec<&ScriptCall> = members.iter().map(|&index| &calls[index]).collect();
            let sent = send(node, &group, first);
            if let Ok(master) = self.master(node) {
                master.answered(!matches!(&sent, Err(error) if error.is_unavailable()));
            }
            let mut part = match sent {
                Err(error) if error.is_unavailable() => {
                    // The master may be gone: if the slot map, read again (from the masters
                    // that answer first, within a response timeout), names another master for
                    // these calls (a replica promoted), they go there; a call that may be sent
                    // twice at all (`retry`) may be sent to the new master.
                    self.map.mark_stale();
                    let moved_to = self
                        .placement(what, Instant::now() + response_timeout)
                        .master_of(call_slot(group[0]))
                        .cloned()
                        .filter(|now| now != node);
                    match moved_to {
                        Some(now) if retry != Retry::Never => send(&now, &group, None)?,
                        _ => return Err(error),
                    }
                }
                result => result?,
            };
            self.redirect(what, &group, &mut part, replicated, response_timeout)?;
            Ok(part)
        };
        // Several masters: each master's pipeline is written first, on a connection free now,
        // then the replies are read, so the step costs about the slowest master's round trip
        // and starts no thread. A master with no free connection is served after, alone.
        let mut firsts: Vec<Option<redis::RedisResult<BatchReply>>> =
            groups.iter().map(|_| None).collect();
        if groups.len() > 1 {
            let mut in_flight = Vec::new();
            for (index, (node, members)) in groups.iter().enumerate() {
                let Ok(master) = self.master(node) else {
                    continue;
                };
                let Some(mut con) = master.commands.try_checkout() else {
                    continue;
                };
                let group: Vec<&ScriptCall> = members.iter().map(|&i| &calls[i]).collect();
                let sent = crate::batch::send_batch(
                    &mut con,
                    &group,
                    plan_of(&master),
                    response_timeout,
                    Announce::ShardedPublish,
                );
                match sent {
                    Ok(sent) => in_flight.push((index, master, con, group, sent)),
                    Err(error) => {
                        let failed = Err(error);
                        master.commands.settle(&mut con, &failed);
                        firsts[index] = Some(failed);
                    }
                }
            }
            for (index, master, mut con, group, sent) in in_flight {
                let received = sent.finish(&mut con, &group, &master.replica_sync);
                master.commands.settle(&mut con, &received);
                firsts[index] = Some(received);
            }
        }
        let results: Vec<Result<BatchReply, LockError>> = groups
            .iter()
            .zip(firsts)
            .map(|((node, members), first)| run(node, members, first))
            .collect();
        let mut replies = vec![None; calls.len()];
        let mut ack = Ack::NotNeeded;
        let mut failed = unplaced;
        for ((node, members), result) in groups.iter().zip(results) {
            match result {
                Ok(part) => {
                    for (&index, reply) in members.iter().zip(part.replies) {
                        replies[index] = Some(reply);
                    }
                    ack = worse(ack, part.ack);
                }
                Err(error) => {
                    tracing::warn!(master = %node, %error, what, "a cluster master failed its part of a step");
                    failed.get_or_insert(error);
                }
            }
        }
        Ok(PartialReply {
            replies,
            ack,
            failed,
        })
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

/// The acknowledgement of a step made of two parts.
/// What each master of a step answered (see [`Cluster::run_batch_parts`]).
pub(crate) struct PartialReply {
    /// Per call, in order: its reply, or `None` when its master failed.
    pub(crate) replies: Vec<Option<redis::Value>>,
    /// The worst acknowledgement of the masters that answered.
    pub(crate) ack: Ack,
    /// The first failed master's error.
    pub(crate) failed: Option<LockError>,
}

fn worse(a: Ack, b: Ack) -> Ack {
    let rank = |ack: &Ack| match ack {
        Ack::NotNeeded => 0,
        Ack::Acknowledged => 1,
        Ack::Missing { .. } => 2,
        Ack::Refused(_) => 3,
    };
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}

/// A script's keys must live in one slot (a cluster refuses it otherwise): Redisson's braces
/// make a lock's keys share its slot, except for names whose braces defeat them.
fn check_one_slot(call: &ScriptCall) -> Result<(), LockError> {
    let Some(first) = call.keys.first() else {
        return Ok(());
    };
    let slot = key_slot(first);
    match call.keys.iter().find(|key| key_slot(key) != slot) {
        None => Ok(()),
        Some(key) => Err(LockError::invalid(
            "name",
            format!(
                "on a Redis Cluster every key of a lock must hash to one slot, and {first:?} \
                 (slot {slot}) and {key:?} (slot {}) do not: a name with `}}` before any `{{`, or \
                 with empty braces `{{}}`, defeats the hash tag; use no braces, or a tag like \
                 `{{orders}}:42`",
                key_slot(key)
            ),
        )),
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

/// The slot of a call: its first key's (all its keys share it).
fn call_slot(call: &ScriptCall) -> u16 {
    call.keys.first().map_or(0, |key| key_slot(key))
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
