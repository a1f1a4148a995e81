//! The rules checked after every step: the lease rule (a hold a thread believes in is on the
//! store until at least its deadline, unless the store ended it, and then it is never believed
//! past the deadline it had), exclusion among the holds the store did not end, permits,
//! set-once steps that set once; and what outlives its caller: a hold nobody believes ends by
//! the deadline of the last request that named it plus its lease, a session keeps alive only
//! holds its client's backend knows, a call whose caller gave up is never sent, and no step
//! is refused for carrying more than the store takes. (Rules met on the way are checked where
//! they happen: an answer "released" only for a release the store made, records lapsing only
//! when nothing that needs them can still arrive, a latched step's copy answering as the
//! first.)

use crate::kind::Kind;
use crate::store::Lease;
use crate::transition::Violation;
use crate::world::{Config, InFlight, World};

impl World {
    /// Checks every rule; the first one broken, in words.
    pub fn check(&self, config: &Config) -> Result<(), Violation> {
        self.check_leases()?;
        self.check_exclusion()?;
        self.check_set_once()?;
        if self.memory.unapplied {
            return Err(Violation(
                "a node's renewal answer waited for another node's before it was applied".into(),
            ));
        }
        self.check_calls()?;
        self.check_sessions(config)?;
        self.check_orphans(config)?;
        if self.memory.oversized {
            return Err(Violation(
                "the store refused a step for carrying more operations than it takes: what the \
                 backend remembers made the name unusable from this client"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Every lease the store keeps, with its name.
    fn leases(&self) -> impl Iterator<Item = (usize, &Lease)> {
        self.store
            .names
            .iter()
            .enumerate()
            .flat_map(|(name, state)| {
                state
                    .holder
                    .iter()
                    .chain(&state.readers)
                    .chain(&state.permits_held)
                    .map(move |lease| (name, lease))
            })
    }

    /// A hold nobody believes (nor waits for, nor is told of) blocks its name no longer than
    /// the deadline of the last request that named it (sent-at plus the network's bound)
    /// plus the lease it asked for. Checked where holds share a lease (a session): elsewhere
    /// only a request naming a hold extends it, to at most its landing plus its lease, and a
    /// request lands within the network's bound, so the rule holds by construction.
    fn check_orphans(&self, config: &Config) -> Result<(), Violation> {
        if !config.sessions {
            return Ok(());
        }
        for (name, lease) in self.leases() {
            let counted_on = self.threads.iter().any(|t| {
                t.holds
                    .iter()
                    .any(|h| h.id == lease.hold && h.believed(self.now))
                    || t.waiting.as_ref().is_some_and(|w| w.hold == lease.hold)
            }) || self
                .network
                .iter()
                .any(|m| matches!(m, InFlight::Grant(g) if g.hold == lease.hold));
            if counted_on {
                continue;
            }
            let promised = self
                .memory
                .promised
                .iter()
                .find(|(id, _)| *id == lease.hold)
                .map_or(0, |(_, until)| *until);
            if lease.until > promised {
                return Err(Violation(format!(
                    "n{name} is kept for {:?} until {}, which nobody believes in, past the \
                     latest its requests asked for ({promised})",
                    lease.hold, lease.until
                )));
            }
        }
        Ok(())
    }

    /// A session keeps alive only holds its client's backend knows (a thread's, or one it
    /// remembers to settle): one it forgot would be kept for the life of the client.
    fn check_sessions(&self, config: &Config) -> Result<(), Violation> {
        if !config.sessions {
            return Ok(());
        }
        for (name, lease) in self.leases() {
            let Some(client) = lease.session else {
                continue;
            };
            let known = config
                .threads
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == client)
                .any(|(t, _)| self.threads[t].holds.iter().any(|h| h.id == lease.hold))
                || self
                    .clients
                    .get(usize::from(client))
                    .is_some_and(|c| c.remembered.iter().any(|r| r.hold == lease.hold));
            if !known {
                return Err(Violation(format!(
                    "client {client}'s session keeps n{name}'s hold {:?}, which its backend \
                     no longer knows: the name is held for as long as the client lives",
                    lease.hold
                )));
            }
        }
        Ok(())
    }

    /// A caller who gave up leaves nothing queued that can take a name: every call in a
    /// client's queue has its caller still waiting for it.
    fn check_calls(&self) -> Result<(), Violation> {
        for message in &self.network {
            if let InFlight::Call(call) = message {
                let t = usize::from(call.thread);
                if !self.threads.get(t).is_some_and(|thread| thread.calling) {
                    return Err(Violation(format!(
                        "thread {t} gave up its call, and its step to take n{} is still queued: \
                         sent, it would take the name for nobody",
                        call.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn check_leases(&self) -> Result<(), Violation> {
        for (t, thread) in self.threads.iter().enumerate() {
            for hold in thread.holds.iter().filter(|h| h.believed(self.now)) {
                if let Some((_, frozen)) = self.memory.ended.iter().find(|(id, _)| *id == hold.id) {
                    if hold.deadline > *frozen {
                        return Err(Violation(format!(
                            "thread {t} believes its {:?} hold on n{} until {}, though the store \
                             ended it when its deadline was {frozen}",
                            hold.kind, hold.name, hold.deadline
                        )));
                    }
                    continue;
                }
                let kept = self.store.names[usize::from(hold.name)].lease_of(hold.kind, hold.id);
                match kept {
                    Some(until) if until >= hold.deadline => {}
                    kept => {
                        return Err(Violation(format!(
                            "thread {t} believes its {:?} hold on n{} until {}, and the store \
                             keeps it {}",
                            hold.kind,
                            hold.name,
                            hold.deadline,
                            kept.map_or("not at all".to_owned(), |until| format!("until {until}"))
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_exclusion(&self) -> Result<(), Violation> {
        for name in 0..self.store.names.len() {
            // The holds believed that the store did not end (those it ended may overlap
            // others until their deadline: the price of a force unlock or a lost store).
            let believed: smallvec::SmallVec<[(usize, Kind); 8]> = self
                .threads
                .iter()
                .enumerate()
                .flat_map(|(t, thread)| thread.holds.iter().map(move |h| (t, h)))
                .filter(|(_, h)| usize::from(h.name) == name && h.believed(self.now))
                .filter(|(_, h)| !self.memory.ended.iter().any(|(id, _)| *id == h.id))
                .map(|(t, h)| (t, h.kind))
                .collect();
            if believed
                .windows(2)
                .any(|pair| pair[0].1.family() != pair[1].1.family())
            {
                return Err(Violation(format!(
                    "n{name} is believed held as two kinds at once: {believed:?}"
                )));
            }
            let exclusive: smallvec::SmallVec<[(usize, Kind); 8]> = believed
                .iter()
                .copied()
                .filter(|(_, k)| !matches!(k, Kind::Read | Kind::Semaphore))
                .collect();
            if exclusive.len() > 1 {
                return Err(Violation(format!(
                    "n{name} has two believing holders: {exclusive:?}"
                )));
            }
            if let Some((writer, _)) = exclusive.first() {
                if let Some((reader, _)) = believed
                    .iter()
                    .find(|(t, k)| *k == Kind::Read && t != writer)
                {
                    return Err(Violation(format!(
                        "n{name} is written by thread {writer} and read by thread {reader}"
                    )));
                }
            }
            let permits = believed
                .iter()
                .filter(|(_, k)| *k == Kind::Semaphore)
                .count() as u64;
            let total = self
                .memory
                .permits
                .iter()
                .find(|(n, _)| usize::from(*n) == name)
                .map_or(0, |(_, p)| *p);
            if permits > total {
                return Err(Violation(format!(
                    "n{name}: {permits} permits believed held, of {total}"
                )));
            }
        }
        Ok(())
    }

    fn check_set_once(&self) -> Result<(), Violation> {
        let mut armed = self.memory.armed.clone();
        armed.sort();
        match armed.windows(2).find(|pair| pair[0] == pair[1]) {
            Some(pair) => Err(Violation(format!(
                "the set-once request {:?} set its count or permits twice",
                pair[0]
            ))),
            None => Ok(()),
        }
    }
}
