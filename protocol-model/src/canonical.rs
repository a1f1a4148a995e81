//! A world's canonical form, so that worlds that differ only in what cannot matter any more
//! are explored once: what the checks remember about things gone is dropped, ids are numbered
//! in order of appearance, and times far enough in the past are all the same.

use crate::step::{Answer, HoldId, RequestId, Step, Tenure, Time};
use crate::world::{Config, InFlight, World};

/// A short list kept on the stack while a world is put in canonical form.
type Scratch<T> = smallvec::SmallVec<[T; 16]>;

/// Renumbers the ids of one world, in the order they are met.
#[derive(Default)]
struct Numbering {
    /// The new number of each id (0: not met yet), by id; ids are small.
    map: smallvec::SmallVec<[u32; 48]>,
    next: u32,
}

impl Numbering {
    fn id(&mut self, id: u32) -> u32 {
        let at = id as usize;
        if at >= self.map.len() {
            self.map.resize(at + 1, 0);
        }
        if self.map[at] == 0 {
            self.next += 1;
            self.map[at] = self.next;
        }
        self.map[at]
    }

    fn hold(&mut self, hold: &mut HoldId) {
        hold.0 = self.id(hold.0);
    }

    fn request(&mut self, request: &mut RequestId) {
        request.0 = self.id(request.0);
    }

    fn attempt(&mut self, attempt: &mut u64) {
        // Attempts are drawn from the same counter as the ids.
        *attempt = u64::from(self.id(u32::try_from(*attempt).unwrap_or(u32::MAX)));
    }

    fn step(&mut self, step: &mut Step) {
        match step {
            Step::Acquire(acquire) => {
                self.hold(&mut acquire.owner);
                if let Some(write) = &mut acquire.write_hold {
                    self.hold(write);
                }
                if let Some(offer) = &mut acquire.offer {
                    self.attempt(&mut offer.attempt);
                    self.hold(&mut offer.hold);
                }
            }
            Step::Release { owner, .. } | Step::Status { owner, .. } => self.hold(owner),
            Step::ReleaseTo {
                owner, successor, ..
            } => {
                self.hold(owner);
                self.hold(successor);
            }
            Step::Renew { holds, .. } => {
                for (_, _, owner) in holds {
                    self.hold(owner);
                }
            }
            _ => {}
        }
    }

    fn answer(&mut self, answer: &mut Answer) {
        if let Answer::Leader(Some(hold)) = answer {
            self.hold(hold);
        }
    }
}

impl World {
    /// Puts the world in canonical form (see the module).
    pub fn canonicalize(&mut self, config: &Config) {
        self.forget_what_no_longer_matters();
        self.renumber();
        self.rebase_times(config);
        self.rebase_tokens();
    }

    /// Tokens are only compared: each name's are moved down together, the lowest to 0.
    fn rebase_tokens(&mut self) {
        for (name, state) in self.store.names.iter_mut().enumerate() {
            let name = name as crate::step::Name;
            let held = self
                .threads
                .iter()
                .flat_map(|t| &t.holds)
                .filter(|h| h.name == name)
                .filter_map(|h| h.token);
            let remembered = self
                .memory
                .tokens
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, token)| *token);
            let base = held
                .chain(remembered)
                .chain(std::iter::once(state.token))
                .min()
                .unwrap_or(0);
            state.token -= base;
            for hold in self.threads.iter_mut().flat_map(|t| t.holds.iter_mut()) {
                if hold.name == name {
                    if let Some(token) = &mut hold.token {
                        *token -= base;
                    }
                }
            }
            for (n, token) in self.memory.tokens.iter_mut() {
                if *n == name {
                    *token -= base;
                }
            }
        }
    }

    fn forget_what_no_longer_matters(&mut self) {
        let now = self.now;
        let believed: Scratch<HoldId> = self
            .threads
            .iter()
            .flat_map(|t| &t.holds)
            .filter(|h| h.believed(now))
            .map(|h| h.id)
            .collect();
        // An ended hold matters while a thread believes it, or may come to (a grant on its
        // way, a waiter's hold).
        let granted: Scratch<HoldId> = self
            .network
            .iter()
            .filter_map(|m| match m {
                InFlight::Grant(grant) => Some(grant.hold),
                InFlight::Request { .. } | InFlight::Call(_) => None,
            })
            .chain(
                self.threads
                    .iter()
                    .filter_map(|t| t.waiting.as_ref().map(|w| w.hold)),
            )
            .collect();
        self.memory
            .ended
            .retain(|(id, _)| believed.contains(id) || granted.contains(id));
        self.memory.ended.sort();
        self.memory.ended.dedup();
        // A latched answer, a first answer or a setting matters while a copy of its request
        // may still reach the store.
        let pending: Scratch<RequestId> = self
            .network
            .iter()
            .filter_map(|m| match m {
                InFlight::Request { request, .. } => Some(*request),
                InFlight::Grant(_) | InFlight::Call(_) => None,
            })
            .collect();
        self.store
            .latched
            .retain(|latch| pending.contains(&latch.request));
        self.memory
            .first_answers
            .retain(|(id, _)| pending.contains(id));
        self.memory.armed.retain(|id| pending.contains(id));
        // An outsider's grants matter for the attempts waiters make now (and the last one it
        // heard, to try on a waiter that would believe any).
        let waiting: Scratch<u64> = self
            .threads
            .iter()
            .filter_map(|t| t.waiting.as_ref().map(|w| w.attempt))
            .collect();
        let last = self.memory.heard.last().copied();
        self.memory
            .heard
            .retain(|attempt| waiting.contains(attempt) || Some(*attempt) == last);
        self.memory.heard.sort_unstable();
        self.memory.heard.dedup();
        for thread in &mut self.threads {
            thread.holds.retain(|h| h.count > 0);
        }
        // A tombstone matters while its id may still be asked for: a thread's, or a request's
        // on its way.
        let mut used: Scratch<HoldId> = Scratch::new();
        for thread in &self.threads {
            used.extend(thread.holds.iter().map(|h| h.id));
            used.extend(thread.unknown.iter().map(|(_, _, id)| *id));
            used.extend(thread.waiting.iter().map(|w| w.hold));
        }
        for message in &self.network {
            if let InFlight::Request {
                step: Step::Acquire(acquire),
                ..
            } = message
            {
                used.push(acquire.owner);
            }
        }
        for state in &mut self.store.names {
            state.ended.retain(|t| used.contains(&t.hold));
        }
        // A promise matters while the store keeps its hold, or a request naming it may land.
        let mut kept: Scratch<HoldId> = self
            .store
            .names
            .iter()
            .flat_map(|state| {
                state
                    .holder
                    .iter()
                    .chain(&state.readers)
                    .chain(&state.permits_held)
                    .map(|lease| lease.hold)
            })
            .collect();
        for message in &self.network {
            if let InFlight::Request { step, .. } = message {
                match step {
                    Step::Acquire(acquire) => kept.push(acquire.owner),
                    Step::Renew { holds, .. } => kept.extend(holds.iter().map(|(_, _, id)| *id)),
                    Step::ReleaseTo { successor, .. } => kept.push(*successor),
                    _ => {}
                }
            }
        }
        self.memory.promised.retain(|(id, _)| kept.contains(id));
        // Only whether a step on a session names its current gate matters.
        let gates: Scratch<u64> = self.store.sessions.iter().map(|s| s.gate).collect();
        for message in &mut self.network {
            if let InFlight::Request {
                step: Step::Acquire(acquire),
                ..
            } = message
            {
                if let Tenure::Session { client, gate } = &mut acquire.tenure {
                    let current = gates.get(usize::from(*client)).copied();
                    *gate = u64::from(current == Some(*gate));
                }
            }
        }
        for session in &mut self.store.sessions {
            session.gate = 1;
        }
    }

    fn renumber(&mut self) {
        let mut n = Numbering::default();
        for thread in &mut self.threads {
            for hold in &mut thread.holds {
                n.hold(&mut hold.id);
            }
            for (_, _, id) in &mut thread.unknown {
                n.hold(id);
            }
            if let Some(waiting) = &mut thread.waiting {
                n.attempt(&mut waiting.attempt);
                n.hold(&mut waiting.hold);
            }
        }
        for state in &mut self.store.names {
            if let Some(holder) = &mut state.holder {
                n.hold(&mut holder.hold);
            }
            for lease in state
                .readers
                .iter_mut()
                .chain(state.permits_held.iter_mut())
            {
                n.hold(&mut lease.hold);
            }
            state.readers.sort();
            state.permits_held.sort();
            for tombstone in &mut state.ended {
                n.hold(&mut tombstone.hold);
            }
            state.ended.sort();
            for queued in &mut state.queue {
                if let Some(offer) = &mut queued.offer {
                    n.attempt(&mut offer.attempt);
                    n.hold(&mut offer.hold);
                }
            }
        }
        for message in &mut self.network {
            match message {
                InFlight::Request { step, request, .. } => {
                    n.request(request);
                    n.step(step);
                }
                InFlight::Grant(grant) => {
                    n.attempt(&mut grant.attempt);
                    n.hold(&mut grant.hold);
                }
                InFlight::Call(_) => {}
            }
        }
        for latch in self.store.latched.iter_mut() {
            n.request(&mut latch.request);
            n.answer(&mut latch.answer);
        }
        self.store.latched.sort_by_key(|latch| latch.request);
        for client in &mut self.clients {
            for record in client.remembered.iter_mut() {
                n.hold(&mut record.hold);
            }
            client.remembered.sort();
        }
        for (id, _) in self.memory.promised.iter_mut() {
            n.hold(id);
        }
        self.memory.promised.sort();
        for (request, answer) in self.memory.first_answers.iter_mut() {
            n.request(request);
            n.answer(answer);
        }
        self.memory.first_answers.sort_by_key(|(id, _)| *id);
        for (id, _) in self.memory.ended.iter_mut() {
            n.hold(id);
        }
        self.memory.ended.sort();
        for request in self.memory.armed.iter_mut() {
            n.request(request);
        }
        self.memory.armed.sort();
        for attempt in self.memory.heard.iter_mut() {
            n.attempt(attempt);
        }
        self.memory.heard.sort_unstable();
        self.next_id = n.next + 1;
    }

    /// Times before `now - the longest lease` (or the network's bound) all mean "over": they
    /// are made one.
    fn rebase_times(&mut self, config: &Config) {
        let horizon = config
            .leases
            .watchdog
            .max(config.leases.fixed)
            .max(config.leases.grant)
            .max(config.leases.session)
            .max(config.network.unwrap_or(0))
            + 1;
        let base = self.now.saturating_sub(horizon);
        let rebase = |t: &mut Time| *t = t.saturating_sub(base);
        rebase(&mut self.now);
        for thread in &mut self.threads {
            for hold in &mut thread.holds {
                rebase(&mut hold.deadline);
            }
            if let Some(waiting) = &mut thread.waiting {
                rebase(&mut waiting.granted_until);
            }
        }
        for session in &mut self.store.sessions {
            rebase(&mut session.until);
        }
        for latch in &mut self.store.latched {
            rebase(&mut latch.until);
        }
        for client in &mut self.clients {
            for record in &mut client.remembered {
                rebase(&mut record.until);
            }
            rebase(&mut client.session_until);
        }
        for (_, until) in &mut self.memory.promised {
            rebase(until);
        }
        for state in &mut self.store.names {
            if let Some(holder) = &mut state.holder {
                rebase(&mut holder.until);
            }
            for lease in state
                .readers
                .iter_mut()
                .chain(state.permits_held.iter_mut())
            {
                rebase(&mut lease.until);
            }
            for tombstone in &mut state.ended {
                rebase(&mut tombstone.until);
            }
        }
        for message in &mut self.network {
            if let InFlight::Request { step, sent, .. } = message {
                if config.network.is_none() {
                    // Landing any time later, it is as old as any other.
                    *sent = 0;
                }
                rebase(sent);
                if let Step::Acquire(acquire) = step {
                    if let Tenure::Until(end) = &mut acquire.tenure {
                        rebase(end);
                    }
                }
            }
        }
        for (_, deadline) in &mut self.memory.ended {
            rebase(deadline);
        }
    }
}

impl World {
    /// Puts its threads in the order `order` (thread `i` after is thread `order[i]` before),
    /// every waiter id following its thread.
    pub fn permute(&mut self, order: &[usize]) {
        let moved_to = |t: u32| -> u32 {
            order
                .iter()
                .position(|from| *from == t as usize)
                .map_or(t, |to| to as u32)
        };
        self.threads = order
            .iter()
            .map(|from| self.threads[*from].clone())
            .collect();
        for state in &mut self.store.names {
            for queued in &mut state.queue {
                queued.waiter.0 = moved_to(queued.waiter.0);
            }
            // In arrival order, as the queue.
            for waiter in state
                .lock_waiting
                .iter_mut()
                .chain(state.writers_waiting.iter_mut())
            {
                waiter.0 = moved_to(waiter.0);
            }
            for waiter in &mut state.readers_waiting {
                waiter.0 = moved_to(waiter.0);
            }
            state.readers_waiting.sort();
        }
        for message in &mut self.network {
            match message {
                InFlight::Call(call) => call.thread = moved_to(u32::from(call.thread)) as u8,
                InFlight::Grant(grant) => grant.waiter.0 = moved_to(grant.waiter.0),
                InFlight::Request { step, .. } => match step {
                    Step::Acquire(acquire) => acquire.waiter.0 = moved_to(acquire.waiter.0),
                    Step::CancelWait { waiter, .. } => waiter.0 = moved_to(waiter.0),
                    _ => {}
                },
            }
        }
    }
}

/// The orders of the threads that make the same world: threads of one client are alike.
pub fn symmetries(config: &Config) -> Vec<Vec<usize>> {
    let mut orders: Vec<Vec<usize>> = vec![Vec::new()];
    let mut clients: Vec<u8> = config.threads.clone();
    clients.dedup();
    for client in clients {
        let members: Vec<usize> = (0..config.threads.len())
            .filter(|t| config.threads[*t] == client)
            .collect();
        let mut next = Vec::new();
        for order in &orders {
            for arrangement in permutations(&members) {
                let mut order = order.clone();
                order.extend(arrangement);
                next.push(order);
            }
        }
        orders = next;
    }
    orders
}

fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, *first);
            all.push(tail);
        }
    }
    all
}
