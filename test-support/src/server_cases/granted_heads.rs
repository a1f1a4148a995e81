//! The waiter behind a granted head. A fair release that grants the head of the queue the lock
//! tells the waiter behind it when that grant runs out: should the granted waiter be dead, the
//! lock is the next one's then. Told to look at once, it would be refused while the granted
//! waiter claims: a call per hand-off for nothing.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::LockClient;

use super::forged_grants::MessageChannel;
use super::Timeouts;

/// A client of its own on `backend`, on a 30 s watchdog lease.
fn client(backend: Arc<dyn DistributedLock>) -> LockClient {
    LockClient::builder(backend)
        .watchdog_lease(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The head is granted the lock but cut off from the store once queued (it can neither claim
/// nor give up); the waiter behind it looks once, when the grant's short lease has run out, and
/// takes the lock then, long before the holder's 30 s lease its last refusal was told of.
pub fn the_waiter_behind_a_dead_granted_head_looks_once_when_the_grant_runs_out<
    E: MessageChannel,
>() {
    let server = E::start();
    let backend = || server.backend_with(Timeouts::default());
    let name = format!("granted-dead:{}", uuid::Uuid::new_v4().simple());
    let cut = FaultyBackend::new(backend());
    let observed = FaultyBackend::new(backend());
    let (holder, doomed, behind) = (
        client(backend()),
        client(Arc::new(cut.clone())),
        client(Arc::new(observed.clone())),
    );
    let inspecting = backend();
    let queued = |count| crate::store_queue::await_queued(&*inspecting, &name, count);
    let held = holder
        .fair_lock(name.clone())
        .lock()
        .expect("the holder locks");
    thread::scope(|s| {
        let doomed_wait = s.spawn(|| {
            doomed
                .fair_lock(name.clone())
                .try_lock_for(Duration::from_secs(60))
                .map(|guard| guard.is_some())
        });
        assert!(queued(1), "the head is queued");
        // From now on none of its calls reaches the store.
        for op in [Op::TryAcquire, Op::Release, Op::Renew, Op::CancelWait] {
            cut.inject(Fault::fail(op));
        }
        let behind_wait = s.spawn(|| {
            let guard = behind
                .fair_lock(name.clone())
                .try_lock_for(Duration::from_secs(20))
                .expect("wait");
            (guard.is_some(), Instant::now())
        });
        assert!(queued(2), "the next is queued");
        // Asleep: subscribed, and its tries answered, the one a new client's waiter makes
        // right after subscribing included.
        crate::conformance::await_quiet(&observed, 1, Duration::from_millis(200));
        let before = observed.calls(Op::TryAcquire);
        let released = Instant::now();
        held.unlock().expect("the holder lets go");
        let (taken, at) = behind_wait.join().expect("the next waiter");
        let looks = observed.calls(Op::TryAcquire) - before;
        // Back in touch (before any assertion, so the scope always ends), the cut-off waiter
        // takes the lock in turn.
        cut.clear();
        assert!(
            taken,
            "the next waiter took the lock within its 20 s wait, not after the holder's 30 s lease"
        );
        assert_eq!(
            looks,
            1,
            "one look, when the grant had run out ({:?} after the release)",
            at - released
        );
        let doomed_got = doomed_wait.join().expect("the cut-off waiter");
        assert!(matches!(doomed_got, Ok(true)), "{doomed_got:?}");
    });
}
