//! Mutual exclusion under contention.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use dlocks::LockClient;

use super::unique;
use crate::env::TestEnv;

const THREADS: usize = 16;
const ROUNDS: usize = 40;

/// A counter incremented by a separate load and store (not atomic as a whole), with a yield
/// between them to widen the race window, and a gauge of threads inside the critical section.
#[derive(Default)]
struct Shared {
    counter: AtomicU64,
    inside: AtomicUsize,
    most_inside: AtomicUsize,
}

impl Shared {
    fn critical_section(&self) {
        let inside = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(inside, Ordering::SeqCst);
        let value = self.counter.load(Ordering::SeqCst);
        thread::yield_now();
        self.counter.store(value + 1, Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn check(&self, expected: usize) {
        assert_eq!(
            self.counter.load(Ordering::SeqCst),
            expected as u64,
            "lost updates"
        );
        assert_eq!(
            self.most_inside.load(Ordering::SeqCst),
            1,
            "two holders at once"
        );
    }
}

fn hammer(clients: &[LockClient], name: &str) {
    let shared = Arc::new(Shared::default());
    thread::scope(|s| {
        for i in 0..THREADS {
            let lock = clients[i % clients.len()].lock(name);
            let shared = shared.clone();
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let _guard = lock.lock().expect("lock");
                    shared.critical_section();
                }
            });
        }
    });
    shared.check(THREADS * ROUNDS);
}

pub fn threads_lose_no_update_under_the_lock(env: &dyn TestEnv) {
    hammer(&[env.client()], &unique("counter"));
}

pub fn clients_lose_no_update_under_the_lock(env: &dyn TestEnv) {
    let clients: Vec<LockClient> = (0..4).map(|_| env.client()).collect();
    hammer(&clients, &unique("counter"));
}

pub fn many_threads_on_thousands_of_names(env: &dyn TestEnv) {
    let client = env.client();
    let prefix = unique("names");
    let names: Vec<String> = (0..2000).map(|i| format!("{prefix}:{i}")).collect();
    thread::scope(|s| {
        for t in 0..8 {
            let (client, names) = (&client, &names);
            s.spawn(move || {
                for name in names.iter().skip(t).step_by(8) {
                    let lock = client.lock(name.as_str());
                    let guard = lock.try_lock().expect("try_lock").expect("name is free");
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    for name in names.iter().step_by(97) {
        assert!(!client.lock(name.as_str()).is_locked().expect("is_locked"));
    }
}
