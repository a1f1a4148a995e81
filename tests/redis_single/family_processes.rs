//! The fair lock, the plain lock and the read-write lock across real OS processes on one
//! `redis-server`: 8 processes × 4 threads on a fair lock, and on a plain lock, lose no update
//! and are served in arrival order (the plain lock's waiters in the order the store first
//! refused them);
//! readers and writers mixed never overlap and lose no write; and faults: a queued waiter's
//! process killed, the holder's process killed, the server restarted.
//!
//! The other processes are this test binary run again with `DLOCK_HELPER` set: the `helper`
//! test below then plays the role it names instead of returning at once.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::cell::Cell;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dlocks::backend::{
    Acquire, AcquireRequest, Clock, DistributedLock, GrantOffer, Handover, HoldRef, LockRef,
    LockStatus, OwnerId, Release, ReleaseSubscription, Renewal,
};
use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockClientBuilder, LockError, LockKind};
use support::helper_process::{helper_role, Reaped};
use support::redis_server::RedisServer;

const PROCESSES: usize = 8;
const THREADS: usize = 4;
const ROUNDS: usize = 25;

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

thread_local! {
    /// When this thread's current acquire first came back "held" to a try that waits (that
    /// queued it, or marked it in turn), i.e. it was queued by then.
    static QUEUED_AT: Cell<Option<u128>> = const { Cell::new(None) };
}

/// A backend that notes, per thread, when an acquire that waits first found the lock held: a
/// thin wrapper any user can write over the public backend contract.
struct QueueProbe(RedisBackend);

impl DistributedLock for QueueProbe {
    fn supports(&self, kind: LockKind) -> bool {
        self.0.supports(kind)
    }
    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let result = self.0.try_acquire(request);
        if let (Ok(Acquire::Held { .. }), true) = (&result, request.will_wait) {
            QUEUED_AT.with(|at| {
                if at.get().is_none() {
                    at.set(Some(wall_ns()));
                }
            });
        }
        result
    }
    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        self.0.release(lock, owner)
    }
    // Forwarded too, so the probe changes nothing but the notes: the fair lock's releases
    // hand the lock to queued waiters here as they do on the bare backend.
    fn hands_over(&self, kind: LockKind) -> bool {
        self.0.hands_over(kind)
    }
    fn keeps_turns(&self) -> bool {
        self.0.keeps_turns()
    }
    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        self.0.release_to(lock, owner, successor)
    }
    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        self.0.renew(holds, lease)
    }
    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        self.0.status(lock, owner)
    }
    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        self.0.force_unlock(lock)
    }
    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.0.subscribe(lock, owner)
    }
    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        // Out of the queue (or its mark gone: a plain waiter that queues behind another thread
        // of its client after all), it is queued again by its next refusal.
        QUEUED_AT.with(|at| at.set(None));
        self.0.cancel_wait(lock, owner, queue_slot)
    }
    fn clock(&self) -> Arc<dyn Clock> {
        self.0.clock()
    }
}

#[test]
fn helper() {
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let backend = RedisBackend::connect(&url).expect("helper connects");
    match role.as_str() {
        "fair-count" => count(&url, backend, LockKind::Fair),
        "plain-count" => count(&url, backend, LockKind::Reentrant),
        "rw-mix" => rw_mix(&url, backend),
        "fair-wait" => {
            // Queue for the lock and wait: the parent kills this process while it is queued.
            let client = LockClientBuilder::new(Arc::new(backend))
                .fair_wait_timeout(Duration::from_secs(1))
                .build()
                .expect("client");
            println!("WAITING");
            let _ = client.fair_lock("procs:fair-dead-waiter").lock();
            println!("ACQUIRED (should have been killed first)");
        }
        "fair-hold" => {
            let client = LockClient::new(backend);
            let guard = client
                .fair_lock("procs:fair-dead-holder")
                .lock_with_lease(Duration::from_secs(2))
                .expect("lock");
            println!("HOLDING");
            std::thread::sleep(Duration::from_secs(60));
            drop(guard);
        }
        "fair-grant" => {
            // Queue for the lock (watchdog lease 30 s): the parent stops this process, hands
            // it the lock, and kills it before it can confirm the grant.
            let client = LockClient::new(backend);
            println!("WAITING");
            let _guard = client.fair_lock("procs:fair-granted").lock();
            println!("ACQUIRED");
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown helper role {other}"),
    }
}

/// The lock `count` takes for `kind` (the fair lock, or the plain lock), and its counter.
fn counted(kind: LockKind) -> (&'static str, &'static str) {
    match kind {
        LockKind::Fair => ("procs:fair-counter-lock", "procs:fair-counter"),
        _ => ("procs:plain-counter-lock", "procs:plain-counter"),
    }
}

/// 4 threads, each incrementing a Redis counter non-atomically under the fair lock or the plain
/// lock (`kind`), printing `ACQ <call start> <queued at or -> <acquired> <released>`
/// (wall-clock ns) for every acquisition.
fn count(url: &str, backend: RedisBackend, kind: LockKind) {
    let client = LockClient::new(QueueProbe(backend));
    let (name, counter) = counted(kind);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .expect("client")
                    .get_connection()
                    .expect("connection");
                let (fair, plain) = (client.fair_lock(name), client.lock(name));
                let mut log = Vec::new();
                for _ in 0..ROUNDS {
                    QUEUED_AT.with(|at| at.set(None));
                    let start = wall_ns();
                    let guard = match kind {
                        LockKind::Fair => fair.lock(),
                        _ => plain.lock(),
                    }
                    .expect("lock");
                    let acquired = wall_ns();
                    let value: i64 = redis::cmd("GET")
                        .arg(counter)
                        .query::<Option<i64>>(&mut con)
                        .expect("GET")
                        .unwrap_or(0);
                    let () = redis::cmd("SET")
                        .arg(counter)
                        .arg(value + 1)
                        .query(&mut con)
                        .expect("SET");
                    let released = wall_ns();
                    guard.unlock().expect("unlock");
                    let queued = QUEUED_AT.with(Cell::get);
                    log.push((start, queued, acquired, released));
                }
                log
            })
        })
        .collect();
    for thread in threads {
        for (start, queued, acquired, released) in thread.join().expect("counting thread") {
            let queued = queued.map_or("-".to_owned(), |q| q.to_string());
            println!("ACQ {start} {queued} {acquired} {released}");
        }
    }
    println!("DONE");
}

/// 4 threads mixing reads (3 in 4) and writes under one read-write lock. Writers bump a
/// register non-atomically; both sides keep gauges of who is inside and count overlaps.
fn rw_mix(url: &str, backend: RedisBackend) {
    let client = LockClient::new(backend);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (client, url) = (client.clone(), url.to_owned());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .expect("client")
                    .get_connection()
                    .expect("connection");
                let rw = client.read_write_lock("procs:rw-lock");
                let (mut writes, mut overlaps) = (0u64, 0u64);
                let mut cmd = |args: &[&str]| -> i64 {
                    let mut command = redis::cmd(args[0]);
                    command.arg(&args[1..]);
                    match command.query::<redis::Value>(&mut con).expect("command") {
                        redis::Value::Int(n) => n,
                        redis::Value::BulkString(bytes) => {
                            String::from_utf8_lossy(&bytes).parse().unwrap_or(0)
                        }
                        _ => 0,
                    }
                };
                for round in 0..ROUNDS {
                    if (round + t) % 4 == 0 {
                        let guard = rw.write_lock().lock().expect("write");
                        if cmd(&["INCR", "procs:rw-writers"]) != 1
                            || cmd(&["GET", "procs:rw-readers"]) != 0
                        {
                            overlaps += 1;
                        }
                        let value = cmd(&["GET", "procs:rw-register"]);
                        std::thread::sleep(Duration::from_micros(200));
                        cmd(&["SET", "procs:rw-register", &(value + 1).to_string()]);
                        cmd(&["DECR", "procs:rw-writers"]);
                        writes += 1;
                        guard.unlock().expect("unlock");
                    } else {
                        let guard = rw.read_lock().lock().expect("read");
                        cmd(&["INCR", "procs:rw-readers"]);
                        if cmd(&["GET", "procs:rw-writers"]) != 0 {
                            overlaps += 1;
                        }
                        std::thread::sleep(Duration::from_micros(200));
                        cmd(&["DECR", "procs:rw-readers"]);
                        guard.unlock().expect("unlock");
                    }
                }
                (writes, overlaps)
            })
        })
        .collect();
    let (mut writes, mut overlaps) = (0, 0);
    for thread in threads {
        let (w, o) = thread.join().expect("thread");
        writes += w;
        overlaps += o;
    }
    println!("RW {writes} {overlaps}");
}

/// One acquisition in a counting process, in wall-clock ns.
struct Acquisition {
    /// When its `lock()` call began.
    start: u128,
    /// When a try of it was first refused: it had its place in the queue by then.
    queued: Option<u128>,
    acquired: u128,
    /// When its holder called `unlock()`.
    released: u128,
}

#[test]
fn eight_processes_of_four_threads_on_a_fair_lock_lose_nothing_and_keep_arrival_order() {
    counted_in_arrival_order(LockKind::Fair);
}

/// The plain lock (Redisson's `RLock` layout), its waiters kept in turn: a waiter waits for
/// the holds of those the store refused before it, however fast the others ask again.
#[test]
fn eight_processes_of_four_threads_on_a_plain_lock_lose_nothing_and_keep_their_turns() {
    counted_in_arrival_order(LockKind::Reentrant);
}

/// 8 processes of 4 threads count under the lock of `kind` (see [`count`]): no update is lost,
/// and no acquisition goes ahead of a waiter queued before its call began.
fn counted_in_arrival_order(kind: LockKind) {
    let (role, counter_key) = match kind {
        LockKind::Fair => ("fair-count", counted(kind).1),
        _ => ("plain-count", counted(kind).1),
    };
    let server = RedisServer::start();
    let mut helpers: Vec<Reaped> = (0..PROCESSES)
        .map(|_| Reaped::spawn(module_path!(), role, &server.url()))
        .collect();
    let mut acquisitions: Vec<Acquisition> = Vec::new();
    for helper in &mut helpers {
        for line in helper.lines_until(None) {
            // libtest may print `test helper ... ` in front of the first line.
            let Some((_, rest)) = line.split_once("ACQ ") else {
                continue;
            };
            let fields: Vec<&str> = rest.split(' ').collect();
            let number = |s: &str| s.parse::<u128>().expect("a number");
            acquisitions.push(Acquisition {
                start: number(fields[0]),
                queued: fields[1].parse().ok(),
                acquired: number(fields[2]),
                released: number(fields[3]),
            });
        }
        assert!(
            helper.0.wait().expect("exit").success(),
            "a counting process failed"
        );
    }
    assert_eq!(acquisitions.len(), PROCESSES * THREADS * ROUNDS);
    let mut admin = server.admin();
    let counter: i64 = redis::cmd("GET")
        .arg(counter_key)
        .query(&mut admin)
        .expect("GET");
    assert_eq!(
        counter as usize,
        PROCESSES * THREADS * ROUNDS,
        "lost updates"
    );
    let queued = acquisitions.iter().filter(|a| a.queued.is_some()).count();
    assert!(
        queued > acquisitions.len() / 2,
        "the lock was contended: {queued} queued"
    );

    // First come, first served: whoever was queued before another's call began got the lock
    // before it. The one exception is the rule for a waiter that does not come for its turn:
    // the fair lock it was handed stays its own for a grant lease (the plain lock waits for it
    // while its mark lives, as long), then goes to the next, and the late waiter queues again.
    // Each such lapse leaves the lock idle a whole grant lease (a stalled process on a loaded
    // machine), and lets one waiter be passed over: the one whose turn lapsed, so that gap
    // lies within its wait.
    acquisitions.sort_by_key(|a| a.acquired);
    let unclaimed_turn = GrantOffer::MAX_LEASE.as_nanos() * 9 / 10;
    let idle: Vec<(u128, u128)> = acquisitions
        .windows(2)
        .map(|pair| (pair[0].released, pair[1].acquired))
        .filter(|(from, to)| to.saturating_sub(*from) >= unclaimed_turn)
        .collect();
    // The waiters passed over, by index, in order of acquisition.
    let passed_over: Vec<usize> = (0..acquisitions.len())
        .filter(|&j| {
            let later = &acquisitions[j];
            later.queued.is_some_and(|queued| {
                acquisitions[..j]
                    .iter()
                    .any(|earlier| queued < earlier.start)
            })
        })
        .collect();
    // Each lapse excuses one of them whose wait it lies in: of those, the first served.
    let mut excused: Vec<usize> = Vec::new();
    for (from, to) in &idle {
        let waited_through = passed_over.iter().copied().find(|&j| {
            let waiter = &acquisitions[j];
            let queued = waiter.queued.unwrap_or(waiter.start);
            !excused.contains(&j) && queued <= *from && *to <= waiter.acquired
        });
        excused.extend(waited_through);
    }
    let overtaken = passed_over
        .iter()
        .filter(|j| !excused.contains(j))
        .map(|&j| {
            let queued = acquisitions[j].queued.unwrap_or(0);
            acquisitions[..j]
                .iter()
                .filter(|earlier| queued < earlier.start)
                .count()
        })
        .sum::<usize>();
    if !excused.is_empty() {
        eprintln!(
            "{} waiters let their turn lapse ({} idle gaps of a grant lease)",
            excused.len(),
            idle.len()
        );
    }
    assert_eq!(
        overtaken, 0,
        "acquisitions that went ahead of a waiter queued before them"
    );
}

#[test]
fn readers_and_writers_in_eight_processes_never_overlap_and_lose_no_write() {
    let server = RedisServer::start();
    let mut helpers: Vec<Reaped> = (0..PROCESSES)
        .map(|_| Reaped::spawn(module_path!(), "rw-mix", &server.url()))
        .collect();
    let (mut writes, mut overlaps) = (0u64, 0u64);
    for helper in &mut helpers {
        let lines = helper.lines_until(None);
        let result = lines
            .iter()
            .find_map(|line| line.split_once("RW ").map(|(_, rest)| rest))
            .expect("a result line");
        let fields: Vec<u64> = result
            .split(' ')
            .map(|f| f.parse().expect("a number"))
            .collect();
        writes += fields[0];
        overlaps += fields[1];
        assert!(helper.0.wait().expect("exit").success(), "a process failed");
    }
    let mut admin = server.admin();
    let register: u64 = redis::cmd("GET")
        .arg("procs:rw-register")
        .query(&mut admin)
        .expect("GET");
    assert_eq!(
        overlaps, 0,
        "a reader inside while a writer was, or two writers"
    );
    assert_eq!(register, writes, "lost writes");
    assert!(writes >= (PROCESSES * THREADS * ROUNDS / 4) as u64);
}

#[test]
fn a_queued_waiter_killed_holds_up_the_fair_queue_only_for_its_slot() {
    let server = RedisServer::start();
    let name = "procs:fair-dead-waiter";
    let client = LockClient::new(server.backend());
    let held = client.fair_lock(name).lock().expect("lock");
    // A process queues (fair wait timeout 1 s), then is killed while queued.
    let mut doomed = Reaped::spawn(module_path!(), "fair-wait", &server.url());
    doomed.lines_until(Some("WAITING"));
    server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
    std::thread::scope(|s| {
        let behind = s.spawn(|| {
            let waiter = LockClient::new(server.backend());
            let guard = waiter
                .fair_lock(name)
                .try_lock_for(Duration::from_secs(30))
                .expect("wait")
                .expect("the lock, once the dead waiter's place timed out");
            guard.unlock().expect("unlock");
            Instant::now()
        });
        server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 2);
        doomed.0.kill().expect("kill -9 the queued process");
        doomed.0.wait().expect("reap");
        let released = Instant::now();
        held.unlock().expect("unlock");
        let acquired = behind.join().expect("the waiter behind");
        let waited = acquired.duration_since(released);
        // Its place lasts one slot (1 s) past the holder's release, then it is dropped.
        assert!(
            waited < Duration::from_secs(6),
            "held up {waited:?} by a dead waiter with a 1 s slot"
        );
    });
}

#[test]
fn a_fair_lock_whose_holder_process_is_killed_goes_to_the_next_waiter_after_its_lease() {
    let server = RedisServer::start();
    let mut holder = Reaped::spawn(module_path!(), "fair-hold", &server.url());
    holder.lines_until(Some("HOLDING"));
    let client = LockClient::new(server.backend());
    let lock = client.fair_lock("procs:fair-dead-holder");
    assert!(
        lock.try_lock().expect("try").is_none(),
        "the other process holds it"
    );
    holder.0.kill().expect("kill -9 the holder");
    holder.0.wait().expect("reap");
    let started = Instant::now();
    let guard = lock
        .try_lock_for(Duration::from_secs(20))
        .expect("wait")
        .expect("taken after the 2 s lease");
    assert!(started.elapsed() < Duration::from_secs(10));
    guard.unlock().expect("unlock");
}

#[test]
fn a_server_restarted_under_a_fair_lock_and_its_waiter_ends_in_a_clear_state() {
    let mut server = RedisServer::start();
    let name = "procs:fair-restart";
    let holder = LockClientBuilder::new(Arc::new(server.backend()))
        .watchdog_lease(Duration::from_millis(1500))
        .build()
        .expect("client");
    let events = holder.lease_events();
    let held = holder.fair_lock(name).lock().expect("lock");
    let waiter_backend = server.backend();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let client = LockClient::new(waiter_backend);
            // Across the restart the waiter may see the server unavailable: that is a clear
            // error, and trying again gets the lock once the server is back.
            for _ in 0..20 {
                match client.fair_lock(name).try_lock_for(Duration::from_secs(10)) {
                    Ok(Some(guard)) => return guard.unlock().is_ok(),
                    Ok(None) => {}
                    Err(error) => assert!(error.is_unavailable(), "{error:?}"),
                }
            }
            false
        });
        server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
        server.restart();
        assert!(
            waiter.join().expect("waiter"),
            "the waiter got the lock after the restart"
        );
    });
    // The holder is told its lock is gone (the restarted server has no data).
    let lost = events
        .recv_timeout(Duration::from_secs(10))
        .expect("a lease event");
    assert_eq!(&*lost.name, name);
    assert!(held.is_lost());
}

#[test]
fn a_waiter_killed_right_after_being_handed_the_fair_lock_holds_it_only_for_the_grant_lease() {
    let server = RedisServer::start();
    let name = "procs:fair-granted";
    let client = LockClient::new(server.backend());
    let held = client.fair_lock(name).lock().expect("lock");
    let mut granted = Reaped::spawn(module_path!(), "fair-grant", &server.url());
    granted.lines_until(Some("WAITING"));
    server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
    assert!(support::store_queue::await_queued(
        &server.backend(),
        name,
        1
    ));
    // Stopped while queued: it can neither take a grant nor confirm one. A step it sent just
    // before lands first (else, run after the release, it would take the lock itself).
    let pid = granted.0.id().to_string();
    let stopped = Command::new("kill").args(["-STOP", &pid]).status();
    assert!(stopped.expect("kill -STOP").success());
    server.settle();
    held.unlock().expect("unlock");
    // The release handed the lock to the stopped waiter, on the short grant lease (2 s), not
    // on its 30 s watchdog lease.
    let fair = client.fair_lock(name);
    assert!(
        fair.is_locked().expect("status"),
        "handed to the queued waiter"
    );
    let lease = fair.remaining_lease().expect("ttl").expect("a lease");
    assert!(lease <= Duration::from_secs(2), "grant lease {lease:?}");
    granted.0.kill().expect("kill -9 the granted process");
    granted.0.wait().expect("reap");
    let guard = fair
        .try_lock_for(Duration::from_secs(10))
        .expect("wait")
        .expect("free once the grant lease ran out");
    guard.unlock().expect("unlock");
}
