//! Which actions a world can take next, within its run's bounds.

use crate::action::{Action, Net};
use crate::kind::Kind;
use crate::step::{Counter, Name};
use crate::world::{Config, World};

impl World {
    /// Every action the world can take next.
    pub fn actions(&self, config: &Config) -> Vec<Action> {
        let mut actions = Vec::new();
        let may_fault = self.faults < config.faults.max;
        for t in 0..self.threads.len() {
            self.thread_actions(config, t, may_fault, &mut actions);
        }
        let clients: Vec<u8> = {
            let mut clients = config.threads.clone();
            clients.sort_unstable();
            clients.dedup();
            clients
        };
        for client in clients {
            let nodes: Vec<u8> = config
                .threads
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == client)
                .flat_map(|(t, _)| self.threads[t].holds.iter())
                .filter(|h| h.watchdog && h.believed(self.now))
                .map(|h| config.nodes[usize::from(h.name)])
                .collect();
            if nodes.is_empty() {
                continue;
            }
            actions.push(Action::Renew {
                client,
                late_node: None,
            });
            if may_fault && config.faults.late_requests {
                let mut nodes = nodes;
                nodes.sort_unstable();
                nodes.dedup();
                for node in nodes {
                    actions.push(Action::Renew {
                        client,
                        late_node: Some(node),
                    });
                }
            }
        }
        actions.extend((0..self.network.len()).map(Action::Deliver));
        actions.push(Action::Tick);
        self.outside_actions(config, may_fault, &mut actions);
        actions
    }

    fn thread_actions(&self, config: &Config, t: usize, may_fault: bool, out: &mut Vec<Action>) {
        let thread = &self.threads[t];
        if thread.calling {
            // Its call waits in the queue: the caller may give up on it.
            out.push(Action::GiveUp { thread: t });
            return;
        }
        if let Some(waiting) = &thread.waiting {
            out.push(Action::Wait {
                thread: t,
                name: waiting.name,
                fixed: waiting.fixed,
            });
            out.push(Action::GiveUp { thread: t });
            return;
        }
        // A lost reply is a late request delivered at once, and a step sent again whose copies
        // arrive in order changes nothing a late first copy does not, but for the latched
        // steps' answers: those two are explored through the others, a step deeper.
        let nets = |resendable: bool, latched: bool| -> Vec<Net> {
            let mut nets = vec![Net::Answered];
            if may_fault {
                if config.faults.lost_replies && !config.faults.late_requests {
                    nets.push(Net::ReplyLost);
                }
                if config.faults.late_requests {
                    nets.push(Net::Late);
                }
                if config.faults.resends && resendable {
                    if latched || !config.faults.late_requests {
                        nets.push(Net::Resent);
                    }
                    if config.faults.late_requests {
                        nets.push(Net::ResentFirstLate);
                    }
                }
            }
            nets
        };
        for (name, kinds) in config.names.iter().enumerate() {
            let name = name as Name;
            for &kind in kinds {
                match kind {
                    Kind::Semaphore => {
                        for step in [
                            Counter::TrySetPermits(config.permits),
                            Counter::AddPermits(1),
                        ] {
                            for net in nets(step.is_set_once(), step.is_set_once()) {
                                out.push(Action::Count {
                                    thread: t,
                                    name,
                                    step,
                                    net,
                                });
                            }
                        }
                    }
                    Kind::Latch => {
                        for step in [Counter::TrySetCount(config.permits), Counter::CountDown] {
                            for net in nets(step.is_set_once(), step.is_set_once()) {
                                out.push(Action::Count {
                                    thread: t,
                                    name,
                                    step,
                                    net,
                                });
                            }
                        }
                    }
                    _ => {}
                }
                if kind == Kind::Fair && thread.hold(name, kind).is_none() {
                    for fixed in [false, true] {
                        out.push(Action::Wait {
                            thread: t,
                            name,
                            fixed,
                        });
                    }
                }
                if !kind.held_by_thread() && thread.hold(name, kind).is_some() {
                    // One permit or leadership per thread is enough to see them excluded.
                    continue;
                }
                // A fixed lease matters where a thread extends its hold (an owned hold is never
                // extended: a permit or a leadership on the watchdog's lease is enough).
                let fixed_too = kind.held_by_thread();
                // A backend with sessions never sends an acquire again: one of unknown outcome
                // is resolved by asking.
                let resendable = !config.sessions;
                for fixed in [false, true].into_iter().take(1 + usize::from(fixed_too)) {
                    for net in nets(resendable, false) {
                        out.push(Action::Lock {
                            thread: t,
                            name,
                            kind,
                            fixed,
                            net,
                        });
                    }
                    if may_fault && config.faults.queued && !fixed {
                        out.push(Action::Lock {
                            thread: t,
                            name,
                            kind,
                            fixed,
                            net: Net::Queued,
                        });
                    }
                }
            }
        }
        for hold in thread.holds.iter().filter(|h| h.count > 0) {
            // A release's copy that arrives after its answer finds its latch, or nothing: the
            // release sent again in order is the one to explore.
            for net in nets(true, true)
                .into_iter()
                .filter(|net| *net != Net::ResentFirstLate)
            {
                out.push(Action::Unlock {
                    thread: t,
                    name: hold.name,
                    kind: hold.kind,
                    net,
                });
            }
            if hold.kind == Kind::Reentrant && hold.count == 1 {
                for to in 0..self.threads.len() {
                    let same_client = to != t && config.threads[to] == config.threads[t];
                    let idle = self.threads[to].waiting.is_none()
                        && self.threads[to].hold(hold.name, hold.kind).is_none();
                    if same_client && idle {
                        out.push(Action::HandOver {
                            thread: t,
                            name: hold.name,
                            to,
                        });
                    }
                }
            }
        }
    }

    fn outside_actions(&self, config: &Config, may_fault: bool, out: &mut Vec<Action>) {
        for (name, state) in self.store.names.iter().enumerate() {
            let name = name as Name;
            let held = state.holder.is_some()
                || !state.readers.is_empty()
                || !state.permits_held.is_empty();
            if !held {
                continue;
            }
            let may_force = self.forced < config.faults.extra_force_unlocks
                || (may_fault && config.faults.force_unlock);
            if may_force {
                for &kind in &config.names[usize::from(name)] {
                    if !matches!(kind, Kind::Semaphore | Kind::Latch) {
                        out.push(Action::ForceUnlock { name, kind });
                    }
                }
            }
            if may_fault && config.faults.store_loss {
                out.push(Action::Lose { name });
            }
        }
        if may_fault && config.faults.forger {
            // It knows the attempts it heard in grant messages, and those the store keeps in
            // its queues (it reads them).
            let mut known: Vec<u64> = self.memory.heard.to_vec();
            known.extend(
                self.store
                    .names
                    .iter()
                    .flat_map(|state| &state.queue)
                    .filter_map(|queued| queued.offer.map(|offer| offer.attempt)),
            );
            known.sort_unstable();
            known.dedup();
            for (t, thread) in self.threads.iter().enumerate() {
                if thread.waiting.is_none() {
                    continue;
                }
                for &attempt in &known {
                    out.push(Action::Forge { thread: t, attempt });
                }
            }
        }
    }
}
