//! The read-write lock: readers share, a writer excludes; each wakes the other; a write holder
//! may read, a reader may not upgrade; a dead reader's share ends with its own lease; a waiting
//! writer holds new readers off, until it goes in, gives up, or its mark runs out; readers that
//! waited behind a writer go before the next writer; only the waiter a client puts forward
//! keeps a mark.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{Effect, Fault, FaultyBackend, Op};
use dlocks::{LockClient, LockClientBuilder, LockError};
use parking_lot::Mutex;

use super::late_steps::client_on;
use super::{await_answered, await_asleep, hold_up_next_try, new_owner, unique};
use crate::env::TestEnv;

pub fn readers_share_and_a_writer_excludes_them(env: &dyn TestEnv) {
    let name = unique("rw-share");
    let clients: Vec<_> = (0..3).map(|_| env.client()).collect();
    let reads: Vec<_> = clients
        .iter()
        .map(|c| {
            c.read_write_lock(name.clone())
                .read_lock()
                .lock()
                .expect("read")
        })
        .collect();
    let rw = env.client().read_write_lock(name.clone());
    assert!(rw.read_lock().is_locked().expect("read held"));
    assert!(!rw.write_lock().is_locked().expect("no writer"));
    assert!(
        rw.write_lock().try_lock().expect("try").is_none(),
        "readers inside"
    );
    drop(reads);
    let write = rw.write_lock().try_lock().expect("try").expect("alone now");
    assert!(rw.write_lock().is_locked().expect("write held"));
    for client in &clients {
        let rw = client.read_write_lock(name.clone());
        assert!(
            rw.read_lock().try_lock().expect("try").is_none(),
            "the writer excludes readers"
        );
        assert!(
            rw.write_lock().try_lock().expect("try").is_none(),
            "and writers"
        );
    }
    write.unlock().expect("unlock");
    assert!(clients[0]
        .read_write_lock(name)
        .read_lock()
        .try_lock()
        .expect("try")
        .is_some());
}

/// A waiting writer is woken by the last reader's release, not by each reader that leaves
/// while others still read: each such message would wake every waiting writer's process for
/// a refused try (a herd on a lock read by many).
pub fn a_waiting_writer_is_woken_by_the_last_reader_only(env: &dyn TestEnv) {
    const READERS: usize = 4;
    let name = unique("rw-writer-wakes");
    let unit = env.unit();
    let observed = FaultyBackend::new(env.backend());
    let w = client_on(env, &observed);
    let reads: Vec<_> = (0..READERS)
        .map(|_| {
            env.client()
                .read_write_lock(name.clone())
                .read_lock()
                .lock_owned_with_lease(unit * 1000)
                .expect("read")
        })
        .collect();
    let messages_before = std::sync::OnceLock::new();
    thread::scope(|s| {
        let writer = s.spawn(|| {
            let guard = w
                .read_write_lock(name.clone())
                .write_lock()
                .try_lock_for(unit * 500)
                .expect("wait")?;
            // The store's messages on the name reach the writer in the order they were sent:
            // whatever the earlier releases sent came before the last one's.
            let messages = observed.answered(Op::Message);
            guard.unlock().expect("unlock");
            Some(messages)
        });
        // Refused, subscribed: asleep.
        await_asleep(env, &observed, 1);
        messages_before
            .set(observed.answered(Op::Message))
            .expect("set once");
        for read in reads {
            read.unlock().expect("unlock");
        }
        // No time passes: only the last release can wake the writer.
        let messages = writer.join().expect("writer").expect("the writer got in");
        let before = messages_before.get().copied().unwrap_or_default();
        assert!(
            messages - before <= 1,
            "{} messages woke the writer for {READERS} readers leaving",
            messages - before
        );
    });
}

/// A writer whose take landed but whose answer was lost asks again and finds its own hold: it
/// is in, and leaves no waiting writer's mark behind to hold readers off once it lets go.
pub fn a_writer_whose_answer_was_lost_leaves_no_mark_behind(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = env.faulty();
    let writer = client_on(env, &faulty);
    // A writer of this client waited before, on another lock.
    let other = unique("rw-lost-write-other");
    let reader = env.client();
    let held = reader.read_write_lock(other.clone()).read_lock().lock();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .read_write_lock(other)
                .write_lock()
                .try_lock_owned_for(unit * 500)
        });
        // Refused, subscribed: asleep.
        await_asleep(env, &faulty, 1);
        held.expect("read").unlock().expect("unlock");
        let got = waiting.join().expect("writer").expect("wait");
        got.expect("in once the reader left")
            .unlock()
            .expect("unlock");
    });
    let name = unique("rw-lost-write");
    faulty.inject(Fault::new(Op::TryAcquire, Effect::LoseReply).times(1));
    let before = faulty.calls(Op::TryAcquire);
    let write = thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .read_write_lock(name.clone())
                .write_lock()
                .try_lock_owned_for(unit * 500)
        });
        // Its first answer lost, it sleeps a short pause (well under a second) before it asks
        // again.
        await_answered(env, &faulty, Op::TryAcquire, before + 1, 1);
        if env.is_virtual_time() {
            env.advance(Duration::from_secs(1));
        }
        waiting.join().expect("writer")
    })
    .expect("wait")
    .expect("in once asked again");
    assert_eq!(
        faulty.calls(Op::TryAcquire) - before,
        2,
        "the first answer was lost, the second found the hold"
    );
    write.unlock().expect("unlock");
    // No time passes: a mark left behind would refuse readers until it ran out.
    let read = env
        .client()
        .read_write_lock(name)
        .read_lock()
        .try_lock()
        .expect("try");
    assert!(read.is_some(), "a reader was refused after the writer left");
}

pub fn waiting_readers_are_all_woken_when_the_writer_leaves(env: &dyn TestEnv) {
    const READERS: usize = 3;
    let name = unique("rw-readers-wake");
    let unit = env.unit();
    let writing = env
        .client()
        .read_write_lock(name.clone())
        .write_lock()
        .lock_with_lease(unit * 1000)
        .expect("write");
    let inside = Mutex::new(0usize);
    let all_in = std::sync::Barrier::new(READERS);
    thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let client = env.client();
                let (name, inside, all_in) = (name.clone(), &inside, &all_in);
                s.spawn(move || {
                    let guard = client
                        .read_write_lock(name)
                        .read_lock()
                        .try_lock_for(unit * 500)
                        .expect("wait")
                        .expect("read after the writer");
                    *inside.lock() += 1;
                    all_in.wait(); // all readers inside at once
                    guard.unlock().expect("unlock");
                })
            })
            .collect();
        env.await_sleepers(READERS);
        writing.unlock().expect("unlock");
        for reader in readers {
            reader.join().expect("reader");
        }
    });
    assert_eq!(*inside.lock(), READERS);
}

pub fn a_writer_may_read_and_a_reader_may_not_upgrade(env: &dyn TestEnv) {
    let name = unique("rw-downgrade");
    let (me, other) = (env.client(), env.client());
    let rw = me.read_write_lock(name.clone());
    let write = rw.write_lock().lock().expect("write");
    let read = rw.read_lock().lock().expect("a writer may read");
    assert_eq!(rw.read_lock().hold_count().expect("count"), 1);
    write
        .unlock()
        .expect("downgrade: the write lock goes, the read stays");
    let theirs = other.read_write_lock(name.clone());
    assert!(
        theirs.write_lock().try_lock().expect("try").is_none(),
        "still read-locked"
    );
    let shared = theirs
        .read_lock()
        .try_lock()
        .expect("try")
        .expect("readers share again");
    drop(shared);
    // Holding the read lock, asking for the write lock can only deadlock: refused at once.
    let error = rw.write_lock().lock().expect_err("an upgrade");
    assert!(
        matches!(error, LockError::WouldDeadlock { .. }),
        "{error:?}"
    );
    assert!(matches!(
        rw.write_lock().try_lock(),
        Err(LockError::WouldDeadlock { .. })
    ));
    assert!(rw
        .read_lock()
        .is_held_by_current_thread()
        .expect("the read lock is untouched"));
    read.unlock().expect("unlock");
    assert!(
        rw.write_lock().try_lock().expect("try").is_some(),
        "free to write now"
    );
}

pub fn read_and_write_holds_are_renewed_in_one_batch(env: &dyn TestEnv) {
    let unit = env.unit();
    let lease = unit * 6;
    let observed = FaultyBackend::new(env.backend());
    let batches = Arc::new(Mutex::new(Vec::new()));
    {
        let batches = batches.clone();
        observed.observe(move |call| {
            if call.op == Op::Renew {
                batches.lock().push(call.names.len());
            }
        });
    }
    let client = LockClientBuilder::new(Arc::new(observed))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let (a, b) = (unique("rw-renew-a"), unique("rw-renew-b"));
    let write_a = client
        .read_write_lock(a.clone())
        .write_lock()
        .lock()
        .expect("write");
    let read_a = client
        .read_write_lock(a.clone())
        .read_lock()
        .lock()
        .expect("read");
    let read_b = client
        .read_write_lock(b.clone())
        .read_lock()
        .lock()
        .expect("read");
    let plain = client.lock(unique("rw-renew-plain")).lock().expect("lock");
    for _ in 0..12 {
        env.advance(lease / 3 + lease / 30);
    }
    for guard in [&write_a, &read_a, &read_b, &plain] {
        assert!(!guard.is_lost(), "{}", guard.name());
    }
    let other = env.client();
    assert!(other
        .read_write_lock(a)
        .read_lock()
        .try_lock()
        .expect("try")
        .is_none());
    assert!(other
        .read_write_lock(b)
        .write_lock()
        .try_lock()
        .expect("try")
        .is_none());
    let batches = batches.lock();
    assert!(batches.len() >= 8, "{} ticks", batches.len());
    assert!(
        batches.iter().all(|holds| *holds == 4),
        "every kind in one call per tick: {batches:?}"
    );
}

pub fn a_dead_readers_share_ends_with_its_own_lease(env: &dyn TestEnv) {
    let name = unique("rw-dead-reader");
    let unit = env.unit();
    // A reader that dies: a fixed lease, never released.
    env.client()
        .read_write_lock(name.clone())
        .read_lock()
        .lock_with_lease(unit * 3)
        .expect("read")
        .leak();
    // A live reader, renewed by its watchdog long after.
    let live = env.client_with_watchdog(unit * 6);
    let reading = live
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    let writer = env.client();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .read_write_lock(name.clone())
                .write_lock()
                .try_lock_for(unit * 500)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(1);
        // Past the dead reader's lease, while the live reader's renewals go on.
        for _ in 0..3 {
            env.advance(unit * 2 + unit / 5);
        }
        assert!(!reading.is_lost());
        // The live reader leaves: the dead one's share is long over, so the writer gets in now.
        reading.unlock().expect("unlock");
        assert_eq!(waiting.join().expect("writer"), Some(true));
    });
}

/// An operator forces the write side open after its writer ran out (a dead writer: a fixed
/// lease, never released) while a reader admitted since holds: there is no writer to end, and
/// the reader keeps its share.
pub fn forcing_a_dead_writer_open_leaves_the_readers_admitted_since(env: &dyn TestEnv) {
    let name = unique("rw-dead-writer");
    let unit = env.unit();
    env.client()
        .read_write_lock(name.clone())
        .write_lock()
        .lock_with_lease(unit * 2)
        .expect("write")
        .leak();
    env.advance(unit * 3);
    let reading = env
        .client()
        .read_write_lock(name.clone())
        .read_lock()
        .lock_with_lease(unit * 1000)
        .expect("read: the writer ran out");
    let admin = env.client().read_write_lock(name.clone());
    assert!(
        !admin.write_lock().force_unlock().expect("force"),
        "no live writer to end"
    );
    assert!(
        admin.read_lock().is_locked().expect("status"),
        "the reader keeps its share"
    );
    assert!(!reading.is_lost());
    reading.unlock().expect("the reader releases its own share");
}

/// Writer preference: while a writer waits, a new reader is refused (readers coming and going
/// cannot starve it); the readers inside keep their shares, and the writer goes in when the
/// last of them leaves, before the reader that came later.
pub fn a_waiting_writer_holds_new_readers_off(env: &dyn TestEnv) {
    let name = unique("rw-writer-first");
    let unit = env.unit();
    let observed = env.faulty();
    let (inside, writer, late) = (env.client(), client_on(env, &observed), env.client());
    let reading = inside
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let guard = writer
                .read_write_lock(name.clone())
                .write_lock()
                .try_lock_for(unit * 500)
                .expect("wait")
                .expect("write after the reader");
            // Still writing: the late reader did not get in before this writer.
            let late_reader_out = late
                .read_write_lock(name.clone())
                .read_lock()
                .try_lock()
                .expect("try")
                .is_none();
            guard.unlock().expect("unlock");
            late_reader_out
        });
        // Its first try refused (and its mark made).
        await_answered(env, &observed, Op::TryAcquire, 1, 1);
        assert!(
            late.read_write_lock(name.clone())
                .read_lock()
                .try_lock()
                .expect("try")
                .is_none(),
            "a new reader waits behind the waiting writer"
        );
        assert!(
            !reading.is_lost(),
            "the reader inside keeps its share while the writer waits"
        );
        reading.unlock().expect("unlock");
        assert!(waiting.join().expect("writer"), "the writer went in first");
    });
    late.read_write_lock(name)
        .read_lock()
        .try_lock()
        .expect("try")
        .expect("the reader goes in once the writer left")
        .unlock()
        .expect("unlock");
}

/// A writer that gives up waiting stops holding readers off at once, and wakes the readers
/// it held off.
pub fn a_writer_that_gives_up_lets_the_readers_in(env: &dyn TestEnv) {
    let name = unique("rw-writer-gives-up");
    let unit = env.unit();
    let (inside, writer, late) = (env.client(), env.client(), env.client());
    let reading = inside
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .read_write_lock(name.clone())
                .write_lock()
                .try_lock_for(unit * 8)
                .expect("wait")
                .is_none()
        });
        env.await_sleepers(1);
        // A wait that ends before a mark the writer left behind would run out (it lives for
        // seconds): only the writer's leaving lets this reader in within it.
        let reader = s.spawn(|| {
            late.read_write_lock(name.clone())
                .read_lock()
                .try_lock_for(unit * 12)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(2);
        // The writer's wait ends; the reader inside still reads.
        env.advance(unit * 9);
        assert!(waiting.join().expect("writer"), "the writer gave up");
        assert_eq!(reader.join().expect("reader"), Some(true));
        assert!(!reading.is_lost());
    });
    reading.unlock().expect("unlock");
}

/// A writer that died while waiting (its attempts marked it, and it never came back) holds
/// new readers off for no longer than its mark's slot.
pub fn a_dead_waiting_writer_holds_readers_off_only_for_its_slot(env: &dyn TestEnv) {
    use dlocks::backend::{AcquireRequest, LockRef, OwnerId};
    let name = unique("rw-dead-writer-mark");
    let unit = env.unit();
    let reading = env
        .client()
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    let (dead, waiter) = (new_owner(), new_owner());
    let marked = env
        .backend()
        .try_acquire(
            &AcquireRequest::new(
                LockRef::new(&name, dlocks::LockKind::Write),
                &dead,
                unit * 50,
            )
            .queued_as(&waiter)
            .waiting(true, unit * 4),
        )
        .expect("the writer's attempt");
    assert!(!marked.is_acquired(), "a reader is inside");
    let late = env.client();
    let rw = late.read_write_lock(name.clone());
    assert!(
        rw.read_lock().try_lock().expect("try").is_none(),
        "the mark holds new readers off"
    );
    thread::scope(|s| {
        let reader = s.spawn(|| {
            rw.read_lock()
                .try_lock_for(unit * 500)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(1);
        env.advance(unit * 5);
        assert_eq!(
            reader.join().expect("reader"),
            Some(true),
            "in once the mark ran out"
        );
    });
    assert!(!reading.is_lost());
    reading.unlock().expect("unlock");
}

/// A reader's mark, put when it was refused behind a writer's hold, goes when that waiter
/// next comes in as a reader, whether as a new hold or by extending one it has: a mark left
/// would hold the next writer off with no reader waiting.
pub fn a_reader_that_comes_in_by_an_extend_leaves_no_mark_behind(env: &dyn TestEnv) {
    use dlocks::backend::{AcquireRequest, LockRef, OwnerId};
    use dlocks::LockKind::{Read, Write};
    let name = unique("rw-extend-unmarks");
    let unit = env.unit();
    let backend = env.backend();
    let [writer, marked, reading, waiter, other, next] = std::array::from_fn(|_| new_owner());
    let ask = |kind, owner: &OwnerId, waiter: &OwnerId, reentry: bool, will_wait: bool| {
        backend
            .try_acquire(
                &AcquireRequest::new(LockRef::new(&name, kind), owner, unit * 50)
                    .queued_as(waiter)
                    .reentering(reentry)
                    .waiting(will_wait, unit * 50),
            )
            .expect("an attempt")
            .is_acquired()
    };
    assert!(
        ask(Write, &writer, &writer, false, false),
        "the lock is free"
    );
    assert!(
        !ask(Read, &marked, &waiter, false, true),
        "behind the writer, the reader marks its waiter"
    );
    backend
        .release(LockRef::new(&name, Write), &writer)
        .expect("the writer leaves");
    assert!(
        ask(Read, &reading, &other, false, false),
        "a reader comes in"
    );
    assert!(
        ask(Read, &reading, &waiter, true, false),
        "the marked waiter comes in by extending that read"
    );
    assert!(
        backend
            .force_unlock(LockRef::new(&name, Read))
            .expect("the readers are forced out"),
        "a reader was inside"
    );
    assert!(
        ask(Write, &next, &next, false, false),
        "the next writer was refused for a mark whose reader came in"
    );
}

/// A waiter's mark is not a use of the name: once the lock is free, the name may become
/// another kind (a latch here) while the mark lives. The waiter that gives up then still takes
/// its mark away, and is not told the name is another kind: it asked for nothing of the name.
pub fn a_waiter_gives_up_after_its_name_became_another_kind(env: &dyn TestEnv) {
    use dlocks::backend::{AcquireRequest, CounterStep, LockRef, OwnerId};
    use dlocks::LockKind::{Read, Write};
    let name = unique("rw-cancel-other-kind");
    let unit = env.unit();
    let backend = env.backend();
    let [writer, reader, waiter] = std::array::from_fn(|_| new_owner());
    let taken = backend
        .try_acquire(&AcquireRequest::new(
            LockRef::new(&name, Write),
            &writer,
            unit * 50,
        ))
        .expect("the writer's attempt");
    assert!(taken.is_acquired(), "the lock is free");
    let refused = backend
        .try_acquire(
            &AcquireRequest::new(LockRef::new(&name, Read), &reader, unit * 50)
                .queued_as(&waiter)
                .waiting(true, unit * 50),
        )
        .expect("the reader's attempt");
    assert!(!refused.is_acquired(), "behind the writer: marked");
    backend
        .release(LockRef::new(&name, Write), &writer)
        .expect("the writer leaves");
    let set = backend
        .counter(CounterStep::TrySetCount {
            name: &name,
            count: 2,
        })
        .expect("the free name becomes a latch");
    assert_eq!(set, 1, "a mark does not keep another kind out");
    backend
        .cancel_wait(LockRef::new(&name, Read), &waiter, unit * 50)
        .expect("the reader gives up");
}

/// Readers that waited behind a writer's hold go in before the next writer: writers one after
/// another cannot starve readers (the lock goes to readers and writers by turns).
pub fn readers_that_waited_behind_a_writer_go_before_the_next_writer(env: &dyn TestEnv) {
    let name = unique("rw-readers-turn");
    let unit = env.unit();
    let observed = env.faulty();
    let (writer, reader) = (env.client(), client_on(env, &observed));
    let rw = writer.read_write_lock(name.clone());
    let writing = rw.write_lock().lock().expect("write");
    let (tried, told) = std::sync::mpsc::channel::<()>();
    thread::scope(|s| {
        let (reader, name) = (&reader, &name);
        let waiting = s.spawn(move || {
            let guard = reader
                .read_write_lock(name.clone())
                .read_lock()
                .try_lock_for(unit * 500)
                .expect("wait");
            // Reading until the next writer has tried.
            let _ = told.recv();
            guard.map(|guard| guard.unlock().is_ok())
        });
        // Its first try refused by the writer's hold (and its mark made).
        await_answered(env, &observed, Op::TryAcquire, 1, 1);
        writing.unlock().expect("unlock");
        // At once, before or after the reader went in: the reader's turn comes first.
        let next = rw.write_lock().try_lock().expect("try");
        tried.send(()).expect("the reader waits for the word");
        assert!(
            next.is_none(),
            "the next writer waits for the reader that waited"
        );
        assert_eq!(waiting.join().expect("reader"), Some(true));
    });
    rw.write_lock()
        .try_lock()
        .expect("try")
        .expect("the writer's turn once the reader left")
        .unlock()
        .expect("unlock");
}

/// A reader whose first try marked it on the store (refused by a writer's hold), but who then
/// queues behind another reader of its client (one refused, unmarked, by a waiting writer),
/// leaves no mark behind: a mark nobody renews would hold the next writer off while the head
/// reader waits behind that writer, all of them until the mark ran out.
pub fn a_reader_queued_behind_its_clients_reader_leaves_no_mark_behind(env: &dyn TestEnv) {
    let name = unique("rw-mark-behind-head");
    let unit = env.unit();
    let patience = Duration::from_secs(20);
    // The first writer's client and the two readers' client, whose tries the test holds up.
    let (first_writer, readers) = (env.faulty(), env.faulty());
    let (first_client, readers_client) = (client_on(env, &first_writer), client_on(env, &readers));
    let next_writer = env.faulty();
    let (inside, next_client) = (env.client(), client_on(env, &next_writer));
    let wait = |client: &LockClient, write: bool| {
        let rw = client.read_write_lock(name.clone());
        let side = if write {
            rw.write_lock().try_lock_for(unit * 500)
        } else {
            rw.read_lock().try_lock_for(unit * 500)
        };
        side.expect("wait").expect("in before the wait ends")
    };
    let reading = inside
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    let (done_tx, done) = mpsc::channel::<&str>();
    let (writing_tx, writing) = mpsc::channel::<()>();
    let (leave_tx, leave) = mpsc::channel::<()>();
    thread::scope(|s| {
        let wait = &wait;
        let client = &first_client;
        s.spawn(move || {
            let guard = wait(client, true);
            writing_tx.send(()).expect("told");
            leave.recv().expect("let go");
            guard.unlock().expect("unlock");
        });
        // Refused while the reader reads (each wait below is for a try the store answered).
        await_answered(env, &first_writer, Op::TryAcquire, 1, 1);
        // The first writer's try after the reader leaves is held up.
        let (writer_try, writer_go) = hold_up_next_try(&first_writer);
        reading.unlock().expect("unlock");
        writer_try.recv_timeout(patience).expect("the writer tries");
        // So is the first reader's first try: the second reader tries meanwhile (the lock is
        // free, the writer waits: refused, unmarked) and heads the client's queue.
        let (reader_try, reader_go) = hold_up_next_try(&readers);
        let (client, told) = (&readers_client, done_tx.clone());
        s.spawn(move || {
            wait(client, false).unlock().expect("unlock");
            told.send("the first reader").expect("told");
        });
        reader_try
            .recv_timeout(patience)
            .expect("the first reader tries");
        let told = done_tx.clone();
        s.spawn(move || {
            wait(client, false).unlock().expect("unlock");
            told.send("the second reader").expect("told");
        });
        // The second reader's try (the first's is still held up).
        await_answered(env, &readers, Op::TryAcquire, 1, 1);
        // The writer's try lands: it writes. Then the first reader's: refused by the writer's
        // hold, it marks itself, and queues behind the second reader.
        writer_go.send(()).expect("go");
        writing
            .recv_timeout(patience)
            .expect("the first writer writes");
        reader_go.send(()).expect("go");
        await_answered(env, &readers, Op::TryAcquire, 2, 2);
        let (client, told) = (&next_client, done_tx.clone());
        s.spawn(move || {
            wait(client, true).unlock().expect("unlock");
            told.send("the next writer").expect("told");
        });
        await_answered(env, &next_writer, Op::TryAcquire, 1, 3);
        leave_tx.send(()).expect("the first writer leaves");
        // No time passes: a mark left behind would never run out.
        let mut finished = Vec::new();
        for _ in 0..3 {
            match done.recv_timeout(patience) {
                Ok(who) => finished.push(who),
                Err(_) => {
                    // Lets every wait end (the mark runs out) so that the threads finish.
                    env.advance(unit * 600);
                    panic!("only {finished:?} got in: a mark left behind held the rest off");
                }
            }
        }
    });
}
