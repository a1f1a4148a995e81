//! A step's calls on a cluster: grouped by the master of their slot, one pipeline per master
//! written before any reply is read, the replies put back in the calls' order.

use std::time::{Duration, Instant};

use dlock_core::LockError;

use super::topology::{key_slot, Node};
use super::{no_master, Cluster, Master};
use crate::batch::BatchReply;
use crate::commands::Retry;
use crate::connection::PooledConnection;
use crate::layout::ScriptCall;
use crate::replica_sync::{Ack, ReplicaSync};
use crate::scripts::Announce;

impl Cluster {
    /// Runs `calls`: each call's keys checked to share one slot first, then one pipeline per
    /// master (see [`crate::batch::run_batch`]), written to every master before any reply is
    /// read (no thread per master); calls a master could not serve are sent again through the
    /// cluster client (see [`super::batch`]). The replies come in the order of `calls`; the
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
}

impl Cluster {
    /// `calls` grouped by the master that serves each one's slot now (by their positions; a
    /// call whose slot has no known master is a group of its own): a step that must not wait
    /// for one master before it hears the others runs each group on its own.
    pub(crate) fn by_master(
        &self,
        what: &str,
        calls: &[ScriptCall],
        response_timeout: Duration,
    ) -> Vec<Vec<usize>> {
        let topology = self.placement(what, Instant::now() + response_timeout);
        let mut groups: Vec<(Option<Node>, Vec<usize>)> = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let master = topology.master_of(call_slot(call)).cloned();
            match groups
                .iter_mut()
                .find(|(node, _)| node.is_some() && *node == master)
            {
                Some((_, members)) => members.push(index),
                None => groups.push((master, vec![index])),
            }
        }
        groups.into_iter().map(|(_, members)| members).collect()
    }
}

/// What each master of a step answered (see [`Cluster::run_batch_parts`]).
pub(crate) struct PartialReply {
    /// Per call, in order: its reply, or `None` when its master failed.
    pub(crate) replies: Vec<Option<redis::Value>>,
    /// The worst acknowledgement of the masters that answered.
    pub(crate) ack: Ack,
    /// The first failed master's error.
    pub(crate) failed: Option<LockError>,
}

/// The acknowledgement of a step made of two parts.
pub(super) fn worse(a: Ack, b: Ack) -> Ack {
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

/// The slot of a call: its first key's (all its keys share it).
pub(super) fn call_slot(call: &ScriptCall) -> u16 {
    call.keys.first().map_or(0, |key| key_slot(key))
}
