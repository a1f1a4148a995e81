//! The fenced lock: a token per new hold, strictly increasing across every holder; a holder
//! whose lease ran out writes with an older token than the one after it.

use std::sync::Mutex;
use std::thread;

use super::unique;
use crate::env::TestEnv;

pub fn fencing_tokens_increase_with_every_new_hold_and_not_on_reentry(env: &dyn TestEnv) {
    let name = unique("fenced");
    let (a, b) = (env.client(), env.client());
    let first = a.fenced_lock(name.clone()).lock().expect("lock");
    let t1 = first.token();
    let again = a.fenced_lock(name.clone()).lock().expect("reentrant");
    assert_eq!(again.token(), t1, "a reentrant acquire is the same hold");
    let longer = a
        .fenced_lock(name.clone())
        .lock_with_lease(env.unit() * 1000)
        .expect("a longer lease extends the hold");
    assert_eq!(longer.token(), t1, "extending the lease keeps the token");
    drop((longer, again));
    first.unlock().expect("unlock");
    let second = b.fenced_lock(name.clone()).lock().expect("lock");
    let t2 = second.token();
    assert!(t2 > t1, "{t2} after {t1}");
    assert!(
        a.lock(name.clone()).try_lock().expect("try").is_none(),
        "the plain lock of the name is the same lock"
    );
    second.unlock().expect("unlock");
    let plain = a.lock(name.clone()).lock().expect("plain");
    plain.unlock().expect("unlock");
    let third = a.fenced_lock(name).lock().expect("lock");
    assert!(
        third.token() > t2,
        "a plain hold in between takes no token, the next one is higher"
    );
}

pub fn fencing_tokens_of_contending_threads_follow_the_order_of_the_holds(env: &dyn TestEnv) {
    const THREADS: usize = 6;
    const ROUNDS: usize = 15;
    let name = unique("fenced-order");
    let log = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..THREADS {
            let client = env.client();
            let (name, log) = (name.clone(), &log);
            s.spawn(move || {
                let lock = client.fenced_lock(name);
                for _ in 0..ROUNDS {
                    let guard = lock.lock().expect("lock");
                    // In the order of the holds, since only the holder appends.
                    log.lock().expect("log").push(guard.token());
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    let log = log.into_inner().expect("log");
    assert_eq!(log.len(), THREADS * ROUNDS);
    assert!(
        log.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens strictly increase in the order of the holds: {log:?}"
    );
}

pub fn a_holder_whose_lease_ran_out_is_fenced_off_by_the_next_token(env: &dyn TestEnv) {
    let name = unique("fenced-late");
    let unit = env.unit();
    let (slow, next) = (env.client(), env.client());
    // The register the lock protects refuses writes older than the newest token it has seen.
    let register = Mutex::new((0u64, String::new()));
    let write = |token: u64, value: &str| {
        let mut register = register.lock().expect("register");
        if token < register.0 {
            return false;
        }
        *register = (token, value.to_owned());
        true
    };
    let paused = slow
        .fenced_lock(name.clone())
        .lock_with_lease(unit * 2)
        .expect("lock");
    // The holder stalls past its lease (a pause, a GC): another takes the lock and writes.
    env.advance(unit * 3);
    let later = next
        .fenced_lock(name.clone())
        .lock()
        .expect("free after the lease");
    assert!(later.token() > paused.token());
    assert!(write(later.token(), "new"));
    // The stalled holder wakes and writes: refused, whatever it believes of its lease.
    assert!(
        !write(paused.token(), "stale"),
        "a stale token must be refused"
    );
    assert_eq!(register.lock().expect("register").1, "new");
    assert!(paused.is_lost());
    later.unlock().expect("unlock");
}
