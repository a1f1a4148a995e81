//! Sessions: one lease a client's watchdog keeps alive for every hold of the client on it
//! (etcd's). A keep-alive extends every hold on the session at once, those nobody believes
//! included: a hold its client forgot would be kept for the life of the client. So a session
//! carries a gate, which its backend moves when it resolves an attempt as not made: a copy of
//! that attempt landing later names the old gate and makes nothing.

use crate::step::Time;
use crate::store::Store;

/// A client's session on the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Session {
    /// When its lease ends (every hold on it with it, unless kept alive).
    pub until: Time,
    /// Its gate: a step on the session made under another gate makes nothing. A new lease (the
    /// old one ran out) moves it too: a copy sent on the old lease finds that lease gone.
    pub gate: u64,
}

impl Store {
    /// Keeps `client`'s session alive until at least `until` (a new lease if it had run out),
    /// and every hold on it with it; the gate a step on it is sent with.
    pub fn keep_alive(&mut self, client: u8, until: Time, now: Time) -> u64 {
        let at = usize::from(client);
        if self.sessions.len() <= at {
            self.sessions.resize(at + 1, Session::default());
        }
        let session = &mut self.sessions[at];
        if session.until <= now {
            session.gate += 1;
            session.until = until;
        } else {
            session.until = session.until.max(until);
        }
        let (end, gate) = (session.until, session.gate);
        for state in &mut self.names {
            let leases = state
                .holder
                .iter_mut()
                .chain(state.readers.iter_mut())
                .chain(state.permits_held.iter_mut());
            for lease in leases.filter(|l| l.session == Some(client)) {
                lease.until = lease.until.max(end);
            }
        }
        gate
    }

    /// Moves `client`'s gate: no step sent on its session before makes anything after.
    pub fn move_gate(&mut self, client: u8) {
        if let Some(session) = self.sessions.get_mut(usize::from(client)) {
            session.gate += 1;
        }
    }

    /// When `client`'s session ends, if it is alive at `now` under `gate`.
    pub(crate) fn session_until(&self, client: u8, gate: u64, now: Time) -> Option<Time> {
        self.sessions
            .get(usize::from(client))
            .filter(|session| session.gate == gate && session.until > now)
            .map(|session| session.until)
    }
}
