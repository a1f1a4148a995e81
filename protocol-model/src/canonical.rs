//! A world's canonical form, so that worlds that differ only in what cannot matter any more
//! are explored once: what the checks remember about things gone is dropped, ids are numbered
//! in order of appearance, and times far enough in the past are all the same.

use crate::step::{Answer, HoldId, RequestId, Step, Time};
use crate::world::{Config, InFlight, World};

/// Renumbers the ids of one world, in the order they are met.
#[derive(Default)]
struct Numbering {
    /// The new number of each id (0: not met yet), by id; ids are small.
    map: Vec<u32>,
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
        let believed: Vec<HoldId> = self
            .threads
            .iter()
            .flat_map(|t| &t.holds)
            .filter(|h| h.believed(now))
            .map(|h| h.id)
            .collect();
        // An ended hold matters while a thread believes it, or may come to (a grant on its
        // way, a waiter's hold).
        let granted: Vec<HoldId> = self
            .network
            .iter()
            .filter_map(|m| match m {
                InFlight::Grant(grant) => Some(grant.hold),
                InFlight::Request { .. } => None,
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
        let pending: Vec<RequestId> = self
            .network
            .iter()
            .filter_map(|m| match m {
                InFlight::Request { request, .. } => Some(*request),
                InFlight::Grant(_) => None,
            })
            .collect();
        self.store.latched.retain(|(id, _)| pending.contains(id));
        self.memory
            .first_answers
            .retain(|(id, _)| pending.contains(id));
        self.memory.armed.retain(|id| pending.contains(id));
        // An outsider's grants matter for the attempts waiters make now (and the last one it
        // heard, to try on a waiter that would believe any).
        let waiting: Vec<u64> = self
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
        let mut used: Vec<HoldId> = Vec::new();
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
            state.ended.retain(|id| used.contains(id));
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
            for id in &mut state.ended {
                n.hold(id);
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
            }
        }
        for (request, answer) in self.store.latched.iter_mut() {
            n.request(request);
            n.answer(answer);
        }
        self.store.latched.sort_by_key(|(id, _)| *id);
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

    /// Times before `now - the longest lease` all mean "over": they are made one.
    fn rebase_times(&mut self, config: &Config) {
        let horizon = config
            .leases
            .watchdog
            .max(config.leases.fixed)
            .max(config.leases.grant)
            + 1;
        let base = self.now.saturating_sub(horizon);
        let rebase = |t: &mut Time| *t = t.saturating_sub(base);
        rebase(&mut self.now);
        for thread in &mut self.threads {
            for hold in &mut thread.holds {
                rebase(&mut hold.deadline);
            }
            if let Some(waiting) = &mut thread.waiting {
                rebase(&mut waiting.refused_at);
            }
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
        }
        for message in &mut self.network {
            if let InFlight::Request {
                renewal: Some((_, sent)),
                ..
            } = message
            {
                rebase(sent);
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
        }
        for message in &mut self.network {
            match message {
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
