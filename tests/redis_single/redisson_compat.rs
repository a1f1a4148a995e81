//! Sharing locks with Redisson: a stand-in Redisson client runs Redisson's lock and unlock
//! scripts (3.24+, with the unlock latch) with its own owner id against the same lock names.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{FaultyBackend, Op};
use dlocks::{HandOff, LockClient};
use support::redis_server::{spawn_waiter, RedisServer};
use support::redisson::Redisson;

#[test]
fn a_redisson_holder_excludes_dlock_and_the_other_way_round() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut redisson = Redisson::new(&server);
    let lock = client.lock("shared:orders");

    assert_eq!(
        redisson.try_lock("shared:orders", Duration::from_secs(30)),
        None
    );
    assert!(
        lock.try_lock().expect("try_lock").is_none(),
        "Redisson holds it"
    );
    let remaining = lock.remaining_lease().expect("remaining").expect("a lease");
    assert!(
        remaining > Duration::from_secs(20),
        "dlock sees Redisson's lease: {remaining:?}"
    );
    assert_eq!(redisson.unlock("shared:orders"), Some(1));

    let guard = lock.lock().expect("free again");
    let pttl = redisson
        .try_lock("shared:orders", Duration::from_secs(30))
        .expect("dlock holds it");
    assert!(pttl > 0, "Redisson gets dlock's remaining lease: {pttl}");
    assert_eq!(
        redisson.unlock("shared:orders"),
        None,
        "Redisson cannot release dlock's hold"
    );
    guard.unlock().expect("unlock");
    assert_eq!(
        redisson.try_lock("shared:orders", Duration::from_secs(30)),
        None
    );
}

#[test]
fn a_redisson_unlock_wakes_a_dlock_waiter() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    // Redisson holds it for a long lease: only its release message can let the waiter in soon.
    let lease = Duration::from_secs(60);
    assert_eq!(redisson.try_lock("shared:wake", lease), None);

    let (waiter, rx) = spawn_waiter(server.backend(), "shared:wake");
    server.await_subscriber("redisson_lock__channel:{shared:wake}");
    let released = Instant::now();
    assert_eq!(redisson.unlock("shared:wake"), Some(1));
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter was woken by the release message");
    waiter.join().expect("waiter");
    assert!(acquired >= released);
}

#[test]
fn a_dlock_release_reaches_a_redisson_subscriber() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut sub_con = server.admin();
    let mut pubsub = sub_con.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{shared:announce}")
        .expect("subscribe");

    let lock = client.lock("shared:announce");
    lock.lock().expect("lock").unlock().expect("unlock");
    let message = pubsub.get_message().expect("release message");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");

    lock.lock().expect("lock").leak();
    assert!(lock.force_unlock().expect("force unlock"));
    let message = pubsub.get_message().expect("force-unlock message");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");
}

// ---- The fair lock -----------------------------------------------------------------------

/// A dlock client's thread waiting (30 s at most) for fair lock `name`: once it holds, it says
/// when, runs `then`, and lets go.
fn dlock_fair_waiter(
    server: &RedisServer,
    name: &'static str,
    then: impl FnOnce() + Send + 'static,
) -> (thread::JoinHandle<()>, std::sync::mpsc::Receiver<Instant>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let backend = server.backend();
    let waiter = thread::spawn(move || {
        let client = LockClient::new(backend);
        let guard = client
            .fair_lock(name)
            .try_lock_for(Duration::from_secs(30))
            .expect("wait")
            .expect("its turn");
        tx.send(Instant::now()).expect("send");
        then();
        guard.unlock().expect("unlock");
    });
    (waiter, rx)
}

/// Redisson joins fair lock `name`'s queue (its tryLock with a wait), `pubsub` listening on
/// its channel first; the wait it asked for.
fn redisson_queues(java: &mut Redisson, pubsub: &mut redis::PubSub<'_>, name: &str) -> Duration {
    pubsub
        .subscribe(java.fair_channel(name))
        .expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let wait = Duration::from_secs(60);
    assert!(
        java.fair_try_lock(name, Duration::from_secs(30), wait)
            .is_some(),
        "queued"
    );
    wait
}

#[test]
fn fair_waiters_of_redisson_and_dlock_share_one_queue_in_arrival_order() {
    let server = RedisServer::start();
    let name = "shared:fair-queue";
    let holder = LockClient::new(server.backend());
    let held = holder.fair_lock(name).lock().expect("dlock holds it");

    // Redisson queues first (its tryLock with a wait joins the queue), listening on its channel.
    let mut java = Redisson::new(&server);
    let mut listener = server.admin();
    let mut pubsub = listener.as_pubsub();
    let wait = redisson_queues(&mut java, &mut pubsub, name);

    // Then a dlock waiter, behind it.
    let (waiter, rx) = dlock_fair_waiter(&server, name, || {});
    // Both waiters listen on their own channel: Redisson's, and dlock's once it is queued.
    server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 2);

    // dlock's release wakes Redisson's waiter alone, on its own channel.
    held.unlock().expect("unlock");
    let message = pubsub
        .get_message()
        .expect("Redisson is told it is its turn");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");
    assert_eq!(
        java.fair_try_lock(name, Duration::from_secs(30), wait),
        None,
        "Redisson first"
    );
    assert!(
        rx.try_recv().is_err(),
        "dlock's waiter, behind it, still waits"
    );

    // Redisson's release wakes dlock's waiter, next in line.
    let released = Instant::now();
    assert_eq!(java.fair_unlock(name), Some(1));
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("dlock's turn");
    waiter.join().expect("waiter");
    assert!(acquired >= released);
}

/// A release that grants a dlock head tells the dlock waiter behind it when the grant runs
/// out (`remind:<ms>`), which Redisson would not understand: a Redisson waiter there is told
/// `0`, as Redisson's own release tells it, and re-reads its wait.
#[test]
fn a_redisson_waiter_behind_a_granted_dlock_head_is_told_as_redisson_tells_it() {
    let server = RedisServer::start();
    let name = "shared:behind-grant";
    let holder = LockClient::new(server.backend());
    let held = holder.fair_lock(name).lock().expect("dlock holds it");
    let (to_waiter, release) = std::sync::mpsc::channel::<()>();
    let (waiter, taken) = dlock_fair_waiter(&server, name, move || {
        let _ = release.recv();
    });
    server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
    // Redisson queues behind the dlock waiter, listening on its channel.
    let mut java = Redisson::new(&server);
    let mut listener = server.admin();
    let mut pubsub = listener.as_pubsub();
    let wait = redisson_queues(&mut java, &mut pubsub, name);

    held.unlock().expect("unlock");
    taken
        .recv_timeout(Duration::from_secs(20))
        .expect("the dlock head was granted the lock");
    let message = pubsub.get_message().expect("Redisson is told");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");

    to_waiter.send(()).expect("let go");
    waiter.join().expect("waiter");
    assert_eq!(
        java.fair_try_lock(name, Duration::from_secs(30), wait),
        None,
        "Redisson's turn"
    );
    assert_eq!(java.fair_unlock(name), Some(1));
}

#[test]
fn a_redisson_rlock_is_held_off_by_a_queued_lock_and_wakes_it_but_does_not_queue() {
    let server = RedisServer::start();
    let name = "shared:queued";
    let queueing = || {
        LockClient::builder(server.backend())
            .lock_hand_off(HandOff::Queue)
            .build()
            .expect("client")
    };
    let (holder, waiting) = (queueing(), queueing());
    let mut java = Redisson::new(&server);

    let held = holder.lock(name).lock().expect("dlock holds it");
    let pttl = java
        .try_lock(name, Duration::from_secs(30))
        .expect("Redisson's RLock is held off");
    assert!(pttl > 0, "Redisson gets dlock's remaining lease: {pttl}");
    assert_eq!(
        java.unlock(name),
        None,
        "Redisson cannot release dlock's hold"
    );
    held.unlock().expect("unlock");

    // Free, it is Redisson's for the asking, as from Redisson's own fair lock: an RLock keeps
    // no place in the queue. Its lease outlasts the waiter's patience: only its release
    // message can let the waiter in in time.
    assert_eq!(java.try_lock(name, Duration::from_secs(60)), None);
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            waiting
                .lock(name)
                .try_lock_for(Duration::from_secs(20))
                .expect("wait")
                .map(|guard| guard.unlock().map_err(|error| error.to_string()))
        });
        // Queued behind Redisson's hold, on its own channel and on the plain lock's, where
        // Redisson's RLock announces its release.
        server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
        server.await_subscriber(&format!("redisson_lock__channel:{{{name}}}"));
        assert_eq!(java.unlock(name), Some(1));
        assert_eq!(
            waiter.join().expect("waiter"),
            Some(Ok(())),
            "the queued waiter, woken by Redisson's release, got the lock"
        );
    });
}

#[test]
fn a_redisson_fair_waiter_that_gives_up_lets_the_next_one_in() {
    let server = RedisServer::start();
    let name = "shared:fair-give-up";
    let mut java = Redisson::new(&server);
    let holder = LockClient::new(server.backend());
    let held = holder.fair_lock(name).lock().expect("lock");
    let wait = Duration::from_secs(300);
    assert!(java
        .fair_try_lock(name, Duration::from_secs(30), wait)
        .is_some());
    let other = LockClient::new(server.backend());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let got = other
                .fair_lock(name)
                .try_lock_for(Duration::from_secs(30))
                .expect("wait");
            tx.send(got.is_some()).expect("send");
        });
        // Once the dlock waiter has queued behind Redisson's (it listens on its own channel),
        // Redisson gives up its place; then the holder releases: the dlock waiter is next.
        server.await_channels(&format!("redisson_lock__channel:{{{name}}}:*"), 1);
        java.fair_acquire_failed(name, wait);
        held.unlock().expect("unlock");
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(true));
    });
}

// ---- The read-write lock -------------------------------------------------------------------

#[test]
fn redisson_and_dlock_readers_share_and_exclude_each_others_writers() {
    let server = RedisServer::start();
    let name = "shared:config";
    let mut java = Redisson::new(&server);
    let client = LockClient::new(server.backend());
    let rw = client.read_write_lock(name);
    let lease = Duration::from_secs(30);

    assert_eq!(java.read_lock(name, lease), None, "Redisson reads");
    let reading = rw
        .read_lock()
        .try_lock()
        .expect("try")
        .expect("dlock reads alongside");
    let other = LockClient::new(server.backend());
    let other_writer = other.read_write_lock(name).write_lock();
    assert!(
        other_writer.try_lock().expect("try").is_none(),
        "readers exclude dlock's writer"
    );
    let mut java_writer = Redisson::new(&server);
    assert!(
        java_writer.write_lock(name, lease).is_some(),
        "and Redisson's writer"
    );
    // Redisson answers 0: released, and other readers (dlock's) still hold the lock.
    assert_eq!(
        java.read_unlock(name),
        Some(0),
        "Redisson's read unlock, dlock still reads"
    );
    assert!(
        java_writer.write_lock(name, lease).is_some(),
        "dlock's reader excludes the writer"
    );
    reading.unlock().expect("unlock");

    assert_eq!(
        java_writer.write_lock(name, lease),
        None,
        "free: Redisson writes"
    );
    assert!(
        rw.read_lock().try_lock().expect("try").is_none(),
        "Redisson's writer excludes readers"
    );
    assert!(
        rw.write_lock().try_lock().expect("try").is_none(),
        "and writers"
    );
    assert_eq!(java_writer.write_unlock(name), Some(1));
    let writing = rw
        .write_lock()
        .try_lock()
        .expect("try")
        .expect("dlock writes");
    assert!(
        java.read_lock(name, lease).is_some(),
        "dlock's writer excludes Redisson's reader"
    );
    writing.unlock().expect("unlock");
    assert_eq!(java.read_lock(name, lease), None);
    assert_eq!(java.read_unlock(name), Some(1));
}

/// A dlock writer that waits holds dlock's new readers off; Redisson's readers do not know its
/// mark and still come in (docs/redis.md). Once every reader left, the writer goes in.
#[test]
fn a_waiting_dlock_writer_holds_dlock_readers_off_and_not_redissons() {
    let server = RedisServer::start();
    let name = "shared:rw-writer-first";
    let lease = Duration::from_secs(60);
    let (mut java, mut java_late) = (Redisson::new(&server), Redisson::new(&server));
    assert_eq!(java.read_lock(name, lease), None, "Redisson reads");
    let (writer, reader) = (
        LockClient::new(server.backend()),
        LockClient::new(server.backend()),
    );
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .read_write_lock(name)
                .write_lock()
                .try_lock_for(Duration::from_secs(30))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        // Until the writer waits, a dlock reader still comes in (and leaves).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match reader
                .read_write_lock(name)
                .read_lock()
                .try_lock()
                .expect("try")
            {
                None => break,
                Some(guard) => guard.unlock().expect("unlock"),
            }
            assert!(Instant::now() < deadline, "the writer never waited");
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            java_late.read_lock(name, lease),
            None,
            "a Redisson reader is not held off"
        );
        assert_eq!(java.read_unlock(name), Some(0), "one reader left");
        assert_eq!(java_late.read_unlock(name), Some(1), "the last reader left");
        assert_eq!(waiting.join().expect("writer"), Some(true));
    });
}

#[test]
fn a_redisson_write_unlock_wakes_a_dlock_reader_and_the_other_way_round() {
    let server = RedisServer::start();
    let name = "shared:rw-wake";
    let mut java = Redisson::new(&server);
    // Redisson writes with a long lease: only its release message can let the reader in soon.
    assert_eq!(java.write_lock(name, Duration::from_secs(60)), None);
    let (tx, rx) = std::sync::mpsc::channel();
    let backend = FaultyBackend::new(server.backend());
    let attempts = backend.clone();
    let reader = std::thread::spawn(move || {
        let client = LockClient::new(backend);
        let guard = client
            .read_write_lock(name)
            .read_lock()
            .try_lock_for(Duration::from_secs(30))
            .expect("wait")
            .expect("read");
        tx.send(Instant::now()).expect("send");
        guard.unlock().expect("unlock");
    });
    // The reader found the lock held, subscribed, and found it held again: only a release
    // message (or the 60 s lease) can let it in now.
    let deadline = Instant::now() + Duration::from_secs(10);
    while attempts.calls(Op::TryAcquire) < 2 {
        assert!(
            Instant::now() < deadline,
            "the reader never started waiting"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let released = Instant::now();
    assert_eq!(java.write_unlock(name), Some(1));
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("woken by Redisson's unlock");
    reader.join().expect("reader");
    assert!(acquired >= released);

    // dlock's write release reaches Redisson's subscribers with Redisson's message, 1.
    let mut listener = server.admin();
    let mut pubsub = listener.as_pubsub();
    pubsub
        .subscribe(format!("redisson_rwlock:{{{name}}}"))
        .expect("subscribe");
    let client = LockClient::new(server.backend());
    client
        .read_write_lock(name)
        .write_lock()
        .lock()
        .expect("write")
        .unlock()
        .expect("unlock");
    let message = pubsub.get_message().expect("announced");
    assert_eq!(message.get_payload::<String>().expect("payload"), "1");
}

// ---- The semaphore and the latch ---------------------------------------------------------

#[test]
fn redisson_and_dlock_share_one_semaphore() {
    let server = RedisServer::start();
    let name = "shared:semaphore";
    let client = LockClient::new(server.backend());
    let mut redisson = Redisson::new(&server);
    let sem = client.semaphore(name);
    assert!(redisson.semaphore_try_set_permits(name, 2));
    assert!(!sem.try_set_permits(5).expect("set"), "Redisson set them");
    let java = redisson
        .semaphore_try_acquire(name, Duration::from_secs(30))
        .expect("a permit for Redisson");
    let rust = sem.try_acquire().expect("try").expect("a permit for dlock");
    assert!(
        sem.try_acquire().expect("try").is_none(),
        "both permits held"
    );
    let soonest = redisson
        .semaphore_try_acquire(name, Duration::from_secs(30))
        .expect_err("none left for Redisson");
    assert!(soonest.is_some(), "Redisson sees the soonest lease end");
    assert_eq!(sem.available_permits().expect("available"), 0);

    // Redisson's release wakes a dlock waiter on Redisson's channel.
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let client = LockClient::new(server.backend());
            let permit = client
                .semaphore(name)
                .try_acquire_for(Duration::from_secs(20))
                .expect("wait")
                .expect("woken by Redisson's release");
            permit.id().to_owned()
        });
        server.await_subscriber(&format!("redisson_sc:{{{name}}}"));
        assert!(redisson.semaphore_release(name, &java));
        let id = waiter.join().expect("waiter");
        // The dlock waiter's permit was given back when its thread ended; Redisson can take one.
        assert_eq!(id.len(), 32);
    });
    // A dlock permit id is Redisson's form: Redisson can release it.
    assert!(redisson.semaphore_release(name, rust.id()));
    assert!(
        rust.release().is_err(),
        "released by Redisson: no longer held"
    );
    assert_eq!(sem.available_permits().expect("available"), 2);
}

#[test]
fn a_redisson_permit_whose_lease_ended_comes_back_to_dlock() {
    let server = RedisServer::start();
    let name = "shared:semaphore-lease";
    let client = LockClient::new(server.backend());
    let mut redisson = Redisson::new(&server);
    assert!(redisson.semaphore_try_set_permits(name, 1));
    redisson
        .semaphore_try_acquire(name, Duration::from_millis(300))
        .expect("a permit for Redisson, never released");
    let started = Instant::now();
    let permit = client
        .semaphore(name)
        .try_acquire_for(Duration::from_secs(20))
        .expect("wait")
        .expect("the permit came back when its lease ended");
    assert!(started.elapsed() >= Duration::from_millis(200));
    permit.release().expect("release");
}

#[test]
fn redisson_and_dlock_share_a_count_down_latch() {
    let server = RedisServer::start();
    let name = "shared:latch";
    let client = LockClient::new(server.backend());
    let mut redisson = Redisson::new(&server);
    let latch = client.count_down_latch(name);
    assert!(redisson.latch_try_set_count(name, 2));
    assert!(!latch.try_set_count(3).expect("set"), "Redisson set it");
    assert_eq!(latch.count().expect("count"), 2);
    thread::scope(|s| {
        let waiter = s.spawn(|| latch.wait_for(Duration::from_secs(20)).expect("wait"));
        server.await_subscriber(&format!("redisson_countdownlatch__channel__{{{name}}}"));
        latch.count_down().expect("dlock counts down");
        assert_eq!(redisson.latch_count(name), 1);
        redisson.latch_count_down(name);
        assert!(
            waiter.join().expect("waiter"),
            "woken by Redisson's count-down"
        );
    });
    assert!(latch.try_set_count(1).expect("set again"));
    assert_eq!(redisson.latch_count(name), 1);
}
