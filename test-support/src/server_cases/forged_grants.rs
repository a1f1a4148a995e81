//! A wake-up is a hint; only the store grants. A fair release that hands the lock to the head
//! waiter tells it on the waiter's own channel, and anyone may publish on a channel (Redis
//! `PUBLISH`, PostgreSQL `NOTIFY`) without any right on the lock's data. An outsider who
//! listened to a real grant, and so knows where the waiter listens and what a grant looks
//! like, forges grants for the waiter's next wait; a reader of the store (a monitoring role
//! that may read every lock table or key and send messages, but not write) reads the
//! waiter's offer and forges a grant naming exactly it. The waiter must believe none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{ServerEnv, Timeouts};

/// An outsider on a store's messages: it hears what is published (where, and what) and may
/// publish, but cannot read or write the locks' data.
pub trait Forger: Send {
    /// The grants heard so far: where each was sent, and the attempt number it named.
    fn grants_heard(&mut self) -> Vec<(String, u64)>;

    /// Listens where the waiters of fair lock `name` queued now are told from now on, as an
    /// outsider that knows their ids may (PostgreSQL tells a waiter on its client's channel;
    /// on Redis every channel is heard already).
    fn listen_to_waiters_of(&mut self, name: &str);

    /// Sends a grant naming `attempt` to `to`, where a grant was heard.
    fn forge(&mut self, to: &str, attempt: u64);

    /// The grant offers the waiters of fair lock `name` keep on the store, read by a role
    /// that may read every lock table or key and send messages but write nothing (an ACL
    /// user with `+@read +publish` on Redis, a role with `SELECT` on every table of the
    /// schema on PostgreSQL): where each waiter listens, and the attempt its offer names.
    fn read_offers(&mut self, name: &str) -> Vec<(String, u64)>;
}

/// A server backend whose waiters are woken by messages anyone may send without a right on
/// the locks' data (Redis `PUBLISH`, PostgreSQL `NOTIFY`): what the forged-grants case needs,
/// run on it by [`forged_grants_suite!`](crate::forged_grants_suite). etcd has no such
/// messages: a waiter is woken by watch events on the lock's own keys, which only a writer of
/// those keys can cause.
pub trait MessageChannel: ServerEnv {
    /// An outsider listening to every message the server sends to waiters from now on, able
    /// to send its own.
    fn forger(&self) -> Box<dyn Forger>;
}

/// The grants an outsider's listening thread heard, and its stop switch (for a harness's
/// [`Forger`]).
#[derive(Clone, Default)]
pub struct Heard {
    grants: Arc<Mutex<Vec<(String, u64)>>>,
    stop: Arc<AtomicBool>,
}

impl Heard {
    /// Notes a grant sent to `to`, naming `attempt`.
    pub fn push(&self, to: String, attempt: u64) {
        self.grants.lock().expect("heard").push((to, attempt));
    }

    /// The grants heard since the last call.
    pub fn take(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.grants.lock().expect("heard"))
    }

    /// Whether the listening thread is to end.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Ends the listening thread (within its read timeout).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Waits (bounded) until the fair lock `name` has one waiter queued on the store.
fn await_queued<E: ServerEnv>(server: &E, name: &str) {
    let backend = server.backend_with(Timeouts::default());
    assert!(
        crate::store_queue::await_queued(&*backend, name, 1),
        "the backend inspects its locks"
    );
}

/// A holds the fair lock, B waits and is handed the lock by A's release (the outsider hears
/// that grant); then A holds it again and B waits again, while the outsider forges grants for
/// B's next attempts (numbers after the one it heard, and around it). B must wait out its
/// bound without believing it holds the lock A holds.
pub fn a_forged_grant_is_not_believed<E: MessageChannel>() {
    let server = E::start();
    let mut forger = server.forger();
    let name = format!("forged:{}", uuid::Uuid::new_v4().simple());
    let holder = server.client();
    let waiter = server.client();
    let fair = holder.fair_lock(name.clone());
    let first = fair.lock().expect("A holds");
    let (to_waiter, orders) = mpsc::channel::<Duration>();
    let (to_test, answers) = mpsc::channel::<bool>();
    let waiting = {
        let fair = waiter.fair_lock(name.clone());
        thread::spawn(move || {
            // One thread for both waits: a waiter's place (and channel) is its thread's.
            for wait in orders {
                let held = fair.try_lock_for(wait).expect("wait").is_some_and(|guard| {
                    guard.unlock().expect("unlock");
                    true
                });
                let _ = to_test.send(held);
            }
        })
    };
    to_waiter.send(Duration::from_secs(20)).expect("order");
    await_queued(&server, &name);
    forger.listen_to_waiters_of(&name);
    first.unlock().expect("A lets go");
    assert!(
        answers
            .recv_timeout(Duration::from_secs(20))
            .expect("B's answer"),
        "B was handed the lock"
    );
    let heard_by = Instant::now() + Duration::from_secs(10);
    let (to, heard) = loop {
        if let Some(grant) = forger.grants_heard().pop() {
            break grant;
        }
        assert!(Instant::now() < heard_by, "the outsider heard no grant");
        thread::sleep(Duration::from_millis(10));
    };

    let second = fair.lock().expect("A holds again");
    to_waiter.send(Duration::from_secs(2)).expect("order");
    await_queued(&server, &name);
    let forging_until = Instant::now() + Duration::from_millis(1800);
    let mut forged = 0u64;
    while Instant::now() < forging_until {
        for attempt in heard.saturating_sub(50)..heard.saturating_add(2_000) {
            forger.forge(&to, attempt);
            forged += 1;
        }
    }
    let believed = answers
        .recv_timeout(Duration::from_secs(20))
        .expect("B's answer");
    assert!(
        !believed,
        "B believed one of {forged} forged grants while A held the lock"
    );
    assert!(!second.is_lost());
    second.unlock().expect("A still held the lock");
    drop(to_waiter);
    waiting.join().expect("waiter");
}

/// A holds the fair lock and B waits for it; a reader of the store reads B's offer each time
/// it changes (each of B's attempts makes a new one) and sends B a grant naming it. B must
/// wait out its bound without believing it holds the lock A holds.
pub fn a_reader_of_the_store_cannot_forge_a_grant<E: MessageChannel>() {
    let server = E::start();
    let mut forger = server.forger();
    let name = format!("read-forged:{}", uuid::Uuid::new_v4().simple());
    let holder = server.client();
    let waiter = server.client();
    let held = holder.fair_lock(name.clone()).lock().expect("A holds");
    let waiting = {
        let fair = waiter.fair_lock(name.clone());
        thread::spawn(move || {
            fair.try_lock_for(Duration::from_secs(3))
                .expect("wait")
                .map(|guard| guard.unlock().expect("unlock"))
                .is_some()
        })
    };
    let mut forged = 0u64;
    while !waiting.is_finished() {
        for (to, attempt) in forger.read_offers(&name) {
            forger.forge(&to, attempt);
            forged += 1;
        }
        thread::sleep(Duration::from_millis(2));
    }
    let believed = waiting.join().expect("waiter");
    assert!(forged > 0, "the reader found no offer to forge a grant for");
    assert!(
        !believed,
        "B believed one of {forged} grants forged from its offers while A held the lock"
    );
    assert!(!held.is_lost());
    held.unlock().expect("A still held the lock");
}

/// Instantiates the cases of a store that grants by messages for `$server`, a harness
/// implementing [`MessageChannel`]: forged grants are not believed, and the waiter behind a
/// granted head is reminded when the grant runs out
/// ([`granted_heads`](crate::server_cases::granted_heads)).
#[macro_export]
macro_rules! forged_grants_suite {
    ($server:ty) => {
        /// The waiter behind a granted head.
        mod granted_heads {
            use super::*;

            #[test]
            fn the_waiter_behind_a_dead_granted_head_looks_once_when_the_grant_runs_out() {
                $crate::server_cases::granted_heads::the_waiter_behind_a_dead_granted_head_looks_once_when_the_grant_runs_out::<
                    $server,
                >();
            }
        }

        /// Grants forged by an outsider on the server's messages are not believed.
        mod forged_grants {
            use super::*;

            #[test]
            fn a_forged_grant_is_not_believed() {
                $crate::server_cases::forged_grants::a_forged_grant_is_not_believed::<$server>();
            }

            #[test]
            fn a_reader_of_the_store_cannot_forge_a_grant() {
                $crate::server_cases::forged_grants::a_reader_of_the_store_cannot_forge_a_grant::<
                    $server,
                >();
            }
        }
    };
}
