//! What a client's backend keeps of its own, on a store with sessions (etcd's kind): which
//! lease a new hold goes on, the attempts whose outcome it does not know and the releases it
//! could not confirm (remembered until their deadline, even if a later attempt as the same
//! hold was answered; then settled: the session's gate moved for an attempt, so that no copy
//! of it still on its way makes anything, the hold deleted if the store has it and no thread
//! counts on it, then forgotten), and the
//! holds it counts on no longer (their deadline passed) which the store may still keep on the
//! session. All of it is settled before each of the client's steps and at each renewal, in
//! steps within the store's limit of operations.

use crate::kind::Kind;
use crate::step::{HoldId, Name, Tenure, Time};
use crate::world::{Config, LocalHold, Remembered, World};

impl World {
    /// The lease thread `t`'s backend puts a hold on: a fixed one of its own from now; the
    /// watchdog's on the client's session, kept alive for it (after the session's over holds
    /// were settled, so that a keep-alive never extends a hold nobody counts on).
    pub(crate) fn tenure(&mut self, config: &Config, t: usize, fixed: bool, lease: Time) -> Tenure {
        if !config.sessions {
            return Tenure::Landed;
        }
        let now = self.now;
        if fixed {
            return Tenure::Until(now + lease);
        }
        let client = config.threads[t];
        let gate = self.keep_session(config, client, now + lease);
        Tenure::Session { client, gate }
    }

    /// The gate of `client`'s session, kept alive for its lease first unless, as the backend
    /// last granted or kept it alive, it lasts until `needed` already (then the store's does
    /// too, and its gate is the one the backend last had, or moved itself).
    pub(crate) fn keep_session(&mut self, config: &Config, client: u8, needed: Time) -> u64 {
        let now = self.now;
        let at = usize::from(client);
        let known = self.clients.get(at).map_or(0, |c| c.session_until);
        if known >= needed {
            if let Some(session) = self.store.sessions.get(at) {
                return session.gate;
            }
        }
        let until = now + config.leases.session;
        let gate = self.store.keep_alive(client, until, now);
        if let Some(backend) = self.clients.get_mut(at) {
            backend.session_until = until;
        }
        gate
    }

    /// Remembers an acquire of unknown outcome on a session, to settle once its deadline has
    /// passed and no copy of it can land any more (an attempt on a lease of its own ends with
    /// that lease, whatever lands).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remember_attempt(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        kind: Kind,
        hold: HoldId,
        until: Time,
        tenure: Tenure,
    ) {
        if matches!(tenure, Tenure::Session { .. }) {
            let until = until.max(self.landed_by(config));
            self.remember(config, t, name, kind, hold, until, true);
        }
    }

    /// Remembers a release of unknown outcome, to settle once the hold's deadline has passed
    /// and no copy of it (nor of an extend that may move the hold onto the session) can land
    /// any more.
    pub(crate) fn remember_release(&mut self, config: &Config, t: usize, hold: &LocalHold) {
        if config.sessions {
            let until = hold.deadline.max(self.landed_by(config));
            self.remember(config, t, hold.name, hold.kind, hold.id, until, false);
        }
    }

    /// When every request sent until now has landed, or never will.
    fn landed_by(&self, config: &Config) -> Time {
        self.now + config.network.unwrap_or(0)
    }

    #[allow(clippy::too_many_arguments)]
    fn remember(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        kind: Kind,
        hold: HoldId,
        until: Time,
        acquire: bool,
    ) {
        let Some(client) = self.clients.get_mut(usize::from(config.threads[t])) else {
            return;
        };
        // One record a hold: an attempt still to settle stays one (its gate still to move)
        // when its release is remembered too, and it is settled no earlier than either.
        let (mut until, mut acquire) = (until, acquire);
        for earlier in client.remembered.iter().filter(|r| r.hold == hold) {
            until = until.max(earlier.until);
            acquire |= earlier.acquire;
        }
        client.remembered.retain(|r| r.hold != hold);
        client.remembered.push(Remembered {
            name,
            kind,
            hold,
            until,
            acquire,
        });
        client.remembered.sort();
    }

    /// Settles what `client`'s backend remembers and counts on no longer, before one of its
    /// steps: false if the store refused a step for its size (the step is then not taken).
    pub(crate) fn settle_client(&mut self, config: &Config, client: u8) -> bool {
        if !config.sessions {
            return true;
        }
        let now = self.now;
        let mut sweeps: Vec<(Name, Kind, HoldId)> = Vec::new();
        // Its threads' holds whose deadline passed: the watchdog renews them no longer, but
        // the store may keep them on the session.
        for (t, _) in config
            .threads
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == client)
        {
            for hold in self.threads[t].holds.iter_mut() {
                if hold.count > 0 && !hold.lost && hold.deadline <= now {
                    hold.lost = true;
                    sweeps.push((hold.name, hold.kind, hold.id));
                }
            }
        }
        let Some(backend) = self.clients.get_mut(usize::from(client)) else {
            return true;
        };
        let due: Vec<Remembered> = backend
            .remembered
            .iter()
            .copied()
            .filter(|r| r.until <= now)
            .collect();
        backend.remembered.retain(|r| r.until > now);
        for record in due {
            let taken = config
                .threads
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == client)
                .any(|(t, _)| {
                    self.threads[t]
                        .holds
                        .iter()
                        .any(|h| h.id == record.hold && !h.lost && h.count > 0)
                });
            // Made or not, a copy of the attempt may still be on its way (the hold found may be
            // a later attempt's as the same hold): no copy makes anything from now on.
            if record.acquire {
                self.store.move_gate(client);
            }
            let found = self.store.names[usize::from(record.name)].holds(record.kind, record.hold);
            if found && !taken {
                // Over, and no thread of the client counts on it (a thread that does, whose
                // next acquire asked as the same hold, ends it itself).
                sweeps.push((record.name, record.kind, record.hold));
            }
        }
        sweeps.sort_unstable();
        sweeps.dedup();
        self.sweep(&sweeps)
    }

    /// Deletes `sweeps` from the store: a step carries as many as fit beside its own
    /// operation, the rest go in steps of their own, each within the store's limit.
    fn sweep(&mut self, sweeps: &[(Name, Kind, HoldId)]) -> bool {
        if sweeps.is_empty() {
            return true;
        }
        let limit = self
            .store
            .settings
            .ops_per_step
            .map_or(usize::MAX, usize::from)
            .max(1);
        let room = (limit - 1).min(sweeps.len());
        let (carried, apart) = sweeps.split_at(room);
        let mut done = apart
            .chunks(limit)
            .all(|chunk| self.store.sweep(chunk, 0).is_ok());
        done = done && self.store.sweep(carried, 1).is_ok();
        if !done {
            self.memory.oversized = true;
        }
        done
    }
}
