//! The watchdog's renewal: each client renews its believed holds node by node, each node's
//! part applied when it answers. On a store with sessions the renewal also keeps the client's
//! session alive (with every hold on it), after its backend settled what it remembers.

use crate::few::Few;
use crate::kind::Kind;
use crate::step::{Answer, HoldId, Name, Step, Time};
use crate::world::{Config, InFlight, World};

impl World {
    pub(crate) fn renew(&mut self, config: &Config, client: u8, late_node: Option<u8>) {
        let now = self.now;
        if late_node.is_some() {
            self.faults += 1;
        }
        if !self.settle_client(config, client) {
            return;
        }
        let holds: Vec<(u8, Name, Kind, HoldId)> = config
            .threads
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == client)
            .flat_map(|(t, _)| self.threads[t].holds.iter())
            .filter(|h| h.watchdog && h.believed(now))
            .map(|h| (config.nodes[usize::from(h.name)], h.name, h.kind, h.id))
            .collect();
        let mut nodes: Vec<u8> = holds.iter().map(|(node, ..)| *node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        if config.sessions && late_node.is_none() {
            // The session's keep-alive (with a late part, it lands with that part), unless the
            // session lasts past the renewal's promise already.
            self.keep_session(config, client, now + config.leases.watchdog);
        }
        for node in nodes {
            let part: Few<(Name, Kind, HoldId)> = holds
                .iter()
                .filter(|(n, ..)| *n == node)
                .map(|(_, name, kind, id)| (*name, *kind, *id))
                .collect();
            let step = Step::Renew {
                holds: part.clone(),
                lease: config.leases.watchdog,
                session: config.sessions.then_some(client),
            };
            self.note_promised(config, &step);
            let request = self.fresh_request();
            if late_node == Some(node) {
                self.network.push(InFlight::Request {
                    step,
                    request,
                    sent: now,
                    renewal: Some(client),
                });
                continue;
            }
            let answer = self.apply(&step, request).answer;
            self.renewed(config, &part, &answer, now);
        }
        // Failures stay where they happen: a node that answered renewed its holds now,
        // whatever another node does.
        for (node, _, _, id) in &holds {
            if late_node == Some(*node) {
                continue;
            }
            let stale = self.threads.iter().flat_map(|t| &t.holds).any(|h| {
                h.id == *id
                    && !h.lost
                    && self.store.names[usize::from(h.name)].holds(h.kind, h.id)
                    && h.deadline < now + config.leases.watchdog
            });
            if stale {
                self.memory.unapplied = true;
            }
        }
    }

    /// Applies a renewal part's answer, sent at `sent`: each hold still believed is extended
    /// from then; each one found gone is lost.
    pub(crate) fn renewed(
        &mut self,
        config: &Config,
        part: &[(Name, Kind, HoldId)],
        answer: &Answer,
        sent: Time,
    ) {
        let Answer::Renewed(found) = answer else {
            return;
        };
        let now = self.now;
        for ((_, _, id), renewed) in part.iter().zip(found) {
            for thread in &mut self.threads {
                for hold in thread.holds.iter_mut().filter(|h| h.id == *id) {
                    if !hold.believed(now) {
                        continue;
                    }
                    if *renewed {
                        hold.deadline = hold.deadline.max(sent + config.leases.watchdog);
                        hold.unconfirmed = false;
                    } else {
                        hold.lost = true;
                    }
                }
            }
        }
    }
}
