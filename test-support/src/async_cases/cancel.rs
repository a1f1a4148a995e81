//! A thousand acquires cancelled at random points (before their first poll, during a step,
//! while waiting, after the store granted them), while another owner takes and releases the
//! lock: afterwards nothing is held, queued or taken, and the lock is takeable within a second.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use dlocks::testing::{Fault, Op};
use dlocks::{LockError, LockKind};

use super::{keeps, lasting_client, service_runtime, within_a_second};
use crate::conformance::unique;
use crate::env::TestEnv;

/// How many acquires each test cancels.
const CANCELLED: usize = 1000;

/// How many are in flight at once.
const AT_ONCE: usize = 50;

/// What a taken lock or permit is to these tests: dropping it releases it.
type Held = Box<dyn Send>;

type Acquire =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Held, LockError>> + Send>> + Send + Sync>;

/// What the cancelled acquires did.
#[derive(Debug, Default)]
struct Outcomes {
    cancelled: AtomicUsize,
    taken: AtomicUsize,
}

/// Runs [`CANCELLED`] acquires made by `acquire`, each cancelled at a random point, while
/// `churn` takes and releases the lock in a loop; returns once all are done.
fn cancel_at_random_points(
    runtime: &tokio::runtime::Runtime,
    acquire: Acquire,
    churn: Acquire,
) -> Outcomes {
    let outcomes = Arc::new(Outcomes::default());
    let stop = Arc::new(AtomicBool::new(false));
    let churning = {
        let stop = stop.clone();
        runtime.spawn(async move {
            while !stop.load(Ordering::Acquire) {
                // Each acquire here waits at most for a few short holds: a lock left taken by
                // a cancelled acquire would hold it up for the whole 30 s lease.
                let held = tokio::time::timeout(Duration::from_secs(5), churn())
                    .await
                    .expect("the churning owner takes the lock within 5 s")
                    .expect("the churning owner takes the lock");
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..500))).await;
                drop(held);
                tokio::task::yield_now().await;
            }
        })
    };
    let seed = fastrand::u64(..);
    eprintln!("cancellation seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    for batch in 0..CANCELLED / AT_ONCE {
        let tasks: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                let (acquire, outcomes) = (acquire.clone(), outcomes.clone());
                let point = rng.u32(0..4);
                let after = Duration::from_micros(rng.u64(0..3_000));
                runtime.spawn(async move {
                    let mut acquiring = acquire();
                    match point {
                        // Before its first poll.
                        0 => drop(acquiring),
                        // After one poll: in its first step, or parked.
                        1 => {
                            let polled =
                                std::future::poll_fn(|cx| Poll::Ready(acquiring.as_mut().poll(cx)))
                                    .await;
                            if let Poll::Ready(taken) = polled {
                                outcomes.taken.fetch_add(1, Ordering::Relaxed);
                                drop(taken.expect("an acquire"));
                                return;
                            }
                            drop(acquiring);
                        }
                        // At a random instant: during a step, while waiting, or just as the
                        // lock is handed to it.
                        _ => {
                            if let Ok(taken) = tokio::time::timeout(after, acquiring).await {
                                outcomes.taken.fetch_add(1, Ordering::Relaxed);
                                let held = taken.expect("an acquire");
                                tokio::task::yield_now().await;
                                drop(held);
                                return;
                            }
                        }
                    }
                    outcomes.cancelled.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        for task in tasks {
            runtime
                .block_on(task)
                .unwrap_or_else(|error| panic!("batch {batch}: a task failed: {error}"));
        }
    }
    stop.store(true, Ordering::Release);
    runtime
        .block_on(churning)
        .expect("the churning owner ended without a panic");
    Arc::try_unwrap(outcomes).unwrap_or_default()
}

fn boxed<T: Send + 'static>(
    future: impl Future<Output = Result<T, LockError>> + Send + 'static,
) -> Pin<Box<dyn Future<Output = Result<Held, LockError>> + Send>> {
    Box::pin(async move { future.await.map(|taken| Box::new(taken) as Held) })
}

/// The outcomes hold some of each: a test in which nothing was cancelled, or nothing taken,
/// would show nothing.
fn check_spread(outcomes: &Outcomes) {
    let cancelled = outcomes.cancelled.load(Ordering::Relaxed);
    let taken = outcomes.taken.load(Ordering::Relaxed);
    assert_eq!(cancelled + taken, CANCELLED);
    assert!(
        cancelled >= CANCELLED / 4,
        "{cancelled} of {CANCELLED} cancelled"
    );
}

pub fn a_thousand_cancelled_acquires_leave_the_lock_free(env: &dyn TestEnv) {
    let runtime = service_runtime();
    let name = unique("async-cancel");
    let (client, churner, checker) = (lasting_client(env), lasting_client(env), env.client());
    let (mine, theirs) = (client.lock(&name), churner.lock(&name));
    let acquire: Acquire = Arc::new(move || boxed(mine.lock_async()));
    let churn: Acquire = Arc::new(move || boxed(theirs.lock_async()));
    let outcomes = cancel_at_random_points(&runtime, acquire, churn);
    check_spread(&outcomes);
    let taken = runtime.block_on(within_a_second(
        "the lock after a thousand cancelled acquires",
        checker.lock(&name).lock_async(),
    ));
    // And by a thread of the client whose futures were cancelled (its queue is empty).
    drop(taken);
    let again = client.lock(&name).try_lock_for(Duration::from_secs(1));
    assert!(again.expect("try_lock_for").is_some());
}

pub fn a_thousand_cancelled_fair_acquires_leave_no_queue_entry(env: &dyn TestEnv) {
    if !keeps(env, LockKind::Fair) {
        return;
    }
    let runtime = service_runtime();
    let name = unique("async-cancel-fair");
    let (client, churner, checker) = (lasting_client(env), lasting_client(env), env.client());
    let (mine, theirs) = (client.fair_lock(&name), churner.fair_lock(&name));
    let acquire: Acquire = Arc::new(move || boxed(mine.lock_async()));
    let churn: Acquire = Arc::new(move || boxed(theirs.lock_async()));
    let outcomes = cancel_at_random_points(&runtime, acquire, churn);
    check_spread(&outcomes);
    // A waiter left in the store's queue would come first (and hold everyone up until its
    // five-minute slot ran out).
    let taken = runtime.block_on(within_a_second(
        "the fair lock after a thousand cancelled acquires",
        checker.fair_lock(&name).lock_async(),
    ));
    drop(taken);
}

pub fn a_thousand_cancelled_permit_acquires_leave_every_permit(env: &dyn TestEnv) {
    if !keeps(env, LockKind::Semaphore) {
        return;
    }
    const PERMITS: u32 = 3;
    let runtime = service_runtime();
    let name = unique("async-cancel-permits");
    let (client, churner, checker) = (lasting_client(env), lasting_client(env), env.client());
    assert!(client
        .semaphore(&name)
        .try_set_permits(PERMITS)
        .expect("set"));
    // Two permits stay taken by another owner: the acquires contend for the third.
    let (first, second) = (
        churner.semaphore(&name).acquire().expect("permit"),
        churner.semaphore(&name).acquire().expect("permit"),
    );
    let (mine, theirs) = (client.semaphore(&name), churner.semaphore(&name));
    let acquire: Acquire = Arc::new(move || boxed(mine.acquire_async()));
    let churn: Acquire = Arc::new(move || boxed(theirs.acquire_async()));
    let outcomes = cancel_at_random_points(&runtime, acquire, churn);
    check_spread(&outcomes);
    drop((first, second));
    let all = runtime.block_on(within_a_second("every permit", async {
        let semaphore = checker.semaphore(&name);
        let mut permits = Vec::new();
        for _ in 0..PERMITS {
            permits.push(semaphore.acquire_async().await?);
        }
        Ok(permits)
    }));
    assert_eq!(all.len(), PERMITS as usize);
    let available = checker
        .semaphore(&name)
        .available_permits()
        .expect("available");
    assert_eq!(available, 0, "all {PERMITS} taken, none more");
    drop(all);
}

/// How many acquires [`a_burst_of_cancelled_acquires_sends_none_of_their_queued_steps`] asks
/// at once.
const BURST: usize = 600;

/// Six hundred acquires asked at once through a store slowed down (20 ms a step), each polled
/// once (its first step asked of the client's threads, which run a few at a time), then all
/// dropped as the lock is freed. A step still waiting to be sent when its future was dropped
/// is never sent: the store sees no acquire after the drop but the few already on their way
/// (a client runs at most eight at once), and the lock, watched for two seconds, is seen
/// taken at most while those give it back.
pub fn a_burst_of_cancelled_acquires_sends_none_of_their_queued_steps(env: &dyn TestEnv) {
    if !env.backend().may_block() {
        // Its steps run in place, in the future's own poll: nothing is ever queued.
        return;
    }
    let runtime = service_runtime();
    let name = unique("async-burst");
    let faulty = env.faulty();
    let client = dlocks::LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(Duration::from_secs(30))
        .build()
        .expect("client");
    let (holder, watcher) = (env.client(), env.client());
    let held = holder.lock(&name).lock().expect("the holder takes it");
    faulty.inject(Fault::delay(Op::TryAcquire, Duration::from_millis(20)));
    let mut burst: Vec<_> = (0..BURST)
        .map(|_| Box::pin(client.lock(&name).lock_async()))
        .collect();
    runtime.block_on(std::future::poll_fn(|cx| {
        for acquiring in &mut burst {
            assert!(acquiring.as_mut().poll(cx).is_pending(), "the lock is held");
        }
        Poll::Ready(())
    }));
    drop(burst);
    let asked = faulty.calls(Op::TryAcquire);
    held.unlock().expect("unlock");
    let watched_until = std::time::Instant::now() + Duration::from_secs(2);
    let mut seen_taken = 0;
    while std::time::Instant::now() < watched_until {
        if watcher.lock(&name).is_locked().expect("status") {
            seen_taken += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent_after = faulty.calls(Op::TryAcquire) - asked;
    // A step a client's thread took up just as its future was dropped may still go out.
    assert!(
        sent_after <= 8,
        "{sent_after} acquires of the {BURST} dropped futures reached the store after they \
         were dropped ({asked} before); the lock was seen taken {seen_taken} times in 2 s"
    );
    assert!(
        seen_taken <= 8 * 4,
        "the lock was seen taken {seen_taken} times in 2 s after the futures were dropped"
    );
    let next = watcher
        .lock(&name)
        .try_lock_for(Duration::from_secs(5))
        .expect("try_lock_for");
    assert!(next.is_some(), "free once the burst is gone");
}
