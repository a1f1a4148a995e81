//! How a RedLock step reaches the nodes: the same step sent to every node at once, the
//! replies gathered until a majority agrees or the node timeout passes, and the releases that
//! undo a step the majority did not take.

use std::time::Instant;

use dlock_core::backend::{LockRef, OwnerId, Release};
use dlock_core::LockError;
use redis::Value;

use super::Inner;
use crate::commands::InFlight;
use crate::error::{breaks_connection, is_noscript_reply};
use crate::layout::ScriptCall;
use crate::{layout, request_id};

/// What one node is sent in one step.
pub(super) struct Step {
    calls: Vec<ScriptCall>,
    /// Sent on the same connection if the node does not answer in time.
    pub(super) undo: Vec<redis::Cmd>,
}

/// What one node answered in one step: its replies, or why it did not.
type NodeReply = Result<Vec<Value>, LockError>;

/// Run on a node's connection once its replies are read, before the connection goes back to
/// the pool (to leave a clean-up to be written with its next command).
type AfterReply<'a> = &'a dyn Fn(&Step, &[Value], &mut InFlight);

impl Inner {
    /// Sends each node its step and reads every node's replies. A node's time is counted from
    /// the moment its step is written: waiting for one of this process's own pooled
    /// connections is congestion here, not slowness of the node. So the step is written first
    /// to every node with a connection free now; their replies are read (each within the node
    /// timeout from its own send); then the nodes that had none are served one at a time,
    /// holding no other node's connection while waiting for one (no convoy of threads each
    /// holding one node's connection while queueing for the next's). A node with no connection
    /// open at all (down, or being reconnected to) gets no more than the node timeout from the
    /// start of the step. Each connection goes back to its pool as soon as its replies are
    /// read: none is kept while this thread waits for another node's pool.
    pub(super) fn fan_out(&self, what: &str, steps: &[Step]) -> Vec<NodeReply> {
        self.fan_out_then(what, steps, &|_, _, _| {})
    }

    /// As [`fan_out`](Self::fan_out), running `after` on each connection that answered.
    fn fan_out_then(&self, what: &str, steps: &[Step], after: AfterReply<'_>) -> Vec<NodeReply> {
        let unreachable_by = Instant::now() + self.node_timeout;
        let mut replies: Vec<Option<NodeReply>> = steps.iter().map(|_| None).collect();
        let mut sent = Vec::new();
        let mut later = Vec::new();
        for (index, (node, step)) in self.nodes.iter().zip(steps).enumerate() {
            if step.calls.is_empty() {
                replies[index] = Some(Err(LockError::protocol("nothing to send to this node")));
                continue;
            }
            let commands = match node.server_parts() {
                Ok((commands, _)) => commands,
                Err(error) => {
                    replies[index] = Some(Err(error));
                    continue;
                }
            };
            match commands.try_send(what, &step.calls) {
                Some(Ok(in_flight)) => sent.push((index, in_flight, Instant::now())),
                Some(Err(error)) => replies[index] = Some(Err(error)),
                None => later.push(index),
            }
        }
        for (index, mut in_flight, sent_at) in sent {
            let deadline = sent_at + self.node_timeout;
            match in_flight.receive(deadline) {
                Err(error) if breaks_connection(&error) && !error.is_timeout() => {
                    // A pooled connection to a server that restarted: the step never ran
                    // there. Once more, on a fresh connection, after the other replies.
                    in_flight.abandon(&[]);
                    later.push(index);
                }
                received => {
                    replies[index] =
                        Some(self.finish(what, index, &steps[index], in_flight, received, after));
                }
            }
        }
        for index in later {
            let (node, step) = (&self.nodes[index], &steps[index]);
            let reply = node.server_parts().and_then(|(commands, _)| {
                let left = unreachable_by.saturating_duration_since(Instant::now());
                let mut in_flight = commands.send_when_free(what, &step.calls, left)?;
                let received = in_flight.receive(Instant::now() + self.node_timeout);
                self.finish(what, index, step, in_flight, received, after)
            });
            replies[index] = Some(reply);
        }
        replies
            .into_iter()
            .map(|reply| {
                reply.unwrap_or_else(|| Err(LockError::protocol("no reply from this node")))
            })
            .collect()
    }

    /// A node's replies once read: scripts loaded and the step sent again after `NOSCRIPT`;
    /// after an error, the connection is given up with the step's undo written behind it.
    /// Either way the connection is done with when this returns.
    pub(super) fn finish(
        &self,
        what: &str,
        index: usize,
        step: &Step,
        mut in_flight: InFlight,
        received: redis::RedisResult<Vec<Value>>,
        after: AfterReply<'_>,
    ) -> NodeReply {
        let received = match received {
            Ok(replies) if needs_scripts(&replies) => {
                for (call, reply) in step.calls.iter().zip(&replies) {
                    if is_noscript_reply(reply) {
                        call.not_run();
                    }
                }
                in_flight.resend(&step.calls, Instant::now() + self.node_timeout)
            }
            received => received,
        };
        match received {
            Ok(replies) => {
                after(step, &replies, &mut in_flight);
                Ok(replies)
            }
            Err(error) => {
                in_flight.abandon(&step.undo);
                let server = self.nodes[index].endpoint().describe();
                Err(crate::error::to_lock_error(error, what, &server))
            }
        }
    }

    /// The same step for every node.
    pub(super) fn same_step(
        &self,
        calls: impl Fn() -> Vec<ScriptCall>,
        undo: impl Fn() -> Vec<redis::Cmd>,
    ) -> Vec<Step> {
        self.nodes
            .iter()
            .map(|_| Step {
                calls: calls(),
                undo: undo(),
            })
            .collect()
    }

    pub(super) fn unavailable(&self, what: &str, answered: usize) -> LockError {
        LockError::unavailable(
            format!(
                "only {answered} of {} RedLock nodes answered {what} within {:?}; {} are needed",
                self.nodes.len(),
                self.node_timeout,
                self.quorum
            ),
            "no quorum",
        )
    }

    /// Releases `lock` for `owner` on every node; how many released it, how many did not
    /// answer, and whether other clients' waiters heard it on any.
    pub(super) fn release_on(&self, lock: LockRef<'_>, owner: &OwnerId) -> Released {
        let request = request_id::next();
        let lifetime = self.nodes[0].latch_lifetime();
        let steps: Vec<Step> = self
            .nodes
            .iter()
            .map(|node| {
                let listening = |channel: &str| {
                    node.server_parts()
                        .is_ok_and(|(_, pubsub)| pubsub.is_listening(channel))
                };
                Step {
                    calls: vec![layout::release(lock, owner, &request, lifetime, &listening)],
                    undo: Vec::new(),
                }
            })
            .collect();
        // Once released, the latch is no longer needed: deleted with the connection's next
        // command (or it expires).
        let delete_latch = |step: &Step, replies: &[Value], in_flight: &mut InFlight| {
            if let (true, Some(latch)) = (
                release_outcome(replies).is_released(),
                step.calls.first().and_then(ScriptCall::latch_to_delete),
            ) {
                in_flight.defer(&[b"DEL", latch.as_bytes()]);
            }
        };
        let replies = self.fan_out_then("releasing", &steps, &delete_latch);
        let mut outcome = Released::default();
        for reply in replies {
            match reply {
                Ok(replies) => {
                    let release = release_outcome(&replies);
                    outcome.released += usize::from(release.is_released());
                    outcome.heard_by_others |= release == Release::ReleasedToOthers;
                }
                Err(_) => outcome.unanswered += 1,
            }
        }
        outcome
    }

    /// Takes back, on the nodes `on`, what an acquire of `owner`'s hold of `lock` added there
    /// (one count; the hold, if that was its last): a give-back that lands after the thread's
    /// next attempt under the same id took the node again leaves that attempt's count.
    pub(super) fn undo_on(&self, lock: LockRef<'_>, owner: &OwnerId, on: &[usize]) {
        let steps: Vec<Step> = (0..self.nodes.len())
            .map(|index| Step {
                calls: if on.contains(&index) {
                    vec![layout::undo_acquire(lock, owner)]
                } else {
                    Vec::new()
                },
                undo: Vec::new(),
            })
            .collect();
        self.fan_out("giving back", &steps);
    }
}

/// What a release over the nodes found.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Released {
    /// Nodes that released the lock.
    pub(super) released: usize,
    /// Nodes that did not answer.
    pub(super) unanswered: usize,
    /// Other clients' waiters heard the release on some node.
    pub(super) heard_by_others: bool,
}

/// What a node's release step found.
fn release_outcome(replies: &[Value]) -> Release {
    replies
        .first()
        .map_or(Release::NotHeld, layout::release_outcome)
}

/// Whether a node answered `NOSCRIPT` (restarted, scripts flushed).
fn needs_scripts(replies: &[Value]) -> bool {
    replies.iter().any(is_noscript_reply)
}
