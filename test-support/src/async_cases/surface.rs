//! Every kind taken, waited for and released by futures, as the blocking API does it.

use std::time::Duration;

use dlocks::LockKind;

use super::{exclusive_kinds, keeps, service_runtime, within_a_second};
use crate::conformance::unique;
use crate::env::TestEnv;

pub fn futures_take_wait_for_and_release_every_exclusive_kind(env: &dyn TestEnv) {
    let runtime = service_runtime();
    for (kind, make) in exclusive_kinds(env) {
        let name = unique("async-kinds");
        let (a, b, c) = (env.client(), env.client(), env.client());
        let held = runtime.block_on(make(&a, &name)).expect("lock_async");
        assert!(!held.is_lost(), "{kind}");
        assert_eq!(held.kind(), kind);
        let first_token = held.fencing_token();
        assert_eq!(first_token.is_some(), kind == LockKind::Fenced, "{kind}");
        // Another owner's single try finds it held; its wait is a future that holds no thread.
        let tried = runtime.block_on(async {
            match kind {
                LockKind::Reentrant => b.lock(&name).try_lock_async().await,
                LockKind::Fenced => b.fenced_lock(&name).try_lock_async().await,
                LockKind::Fair => b.fair_lock(&name).try_lock_async().await,
                _ => b.read_write_lock(&name).write_lock().try_lock_async().await,
            }
        });
        assert!(tried.expect("try_lock_async").is_none(), "{kind}: excluded");
        let waiter = runtime.spawn(make(&b, &name));
        env.await_sleepers(1);
        assert!(!waiter.is_finished(), "{kind}: waits while held");
        // Woken by the release, without time passing on a manual clock.
        runtime.block_on(held.unlock_async()).expect("unlock_async");
        let next = runtime.block_on(within_a_second("the waiter", async {
            waiter.await.expect("the waiter's task")
        }));
        assert!(!next.is_lost(), "{kind}");
        if let (Some(first), Some(next)) = (first_token, next.fencing_token()) {
            assert!(next > first, "{kind}: a new hold, a higher token");
        }
        // Dropped by async code: given back at once.
        runtime.block_on(async move { drop(next) });
        let last = runtime.block_on(within_a_second("a third owner", make(&c, &name)));
        runtime.block_on(last.unlock_async()).expect("unlock_async");
        let again = runtime.block_on(within_a_second("the first owner again", make(&a, &name)));
        drop(again);
    }
}

pub fn a_future_waits_out_its_bound_and_a_fixed_lease_runs_out(env: &dyn TestEnv) {
    let runtime = service_runtime();
    let unit = env.unit();
    let name = unique("async-bound");
    let (a, b) = (env.client(), env.client());
    let lock = a.lock(&name);
    let held = runtime
        .block_on(lock.lock_with_lease_async(unit * 4))
        .expect("lock_with_lease_async");
    let waiting = runtime.spawn(b.lock(&name).try_lock_for_async(unit * 2));
    env.await_sleepers(1);
    env.advance(unit * 2);
    let waited = runtime.block_on(within_a_second("the bounded wait", async {
        waiting.await.expect("the waiter's task")
    }));
    assert!(waited.is_none(), "the lock stayed held for the whole wait");
    assert!(!held.is_lost());
    // The fixed lease is not renewed: it runs out, and the guard says so.
    env.advance(unit * 3);
    assert!(held.is_lost(), "the fixed lease ran out");
    let taken = runtime
        .block_on(b.lock(&name).try_lock_with_lease_async(unit, unit * 4))
        .expect("try_lock_with_lease_async");
    assert!(taken.is_some(), "free once the lease ran out");
    let refused = runtime.block_on(held.unlock_async());
    assert!(refused.expect_err("the lease was lost").is_not_held());
    // Bad input is refused by the future, not by a panic.
    let zero = runtime.block_on(lock.lock_with_lease_async(Duration::ZERO));
    assert!(zero.expect_err("a zero lease").is_invalid_argument());
    let empty = runtime.block_on(a.lock("").lock_async());
    assert!(empty.expect_err("an empty name").is_invalid_argument());
}

pub fn readers_share_and_a_writer_waits_by_futures(env: &dyn TestEnv) {
    if !keeps(env, LockKind::Read) {
        return;
    }
    let runtime = service_runtime();
    let name = unique("async-rw");
    let (a, b, c) = (env.client(), env.client(), env.client());
    let reading = runtime
        .block_on(a.read_write_lock(&name).read_lock().lock_async())
        .expect("read");
    let also = runtime
        .block_on(b.read_write_lock(&name).read_lock().try_lock_async())
        .expect("read");
    assert!(also.is_some(), "readers share");
    let writing = runtime.spawn(c.read_write_lock(&name).write_lock().lock_async());
    env.await_sleepers(1);
    runtime.block_on(reading.unlock_async()).expect("unlock");
    assert!(!writing.is_finished(), "one reader left");
    drop(also);
    let writer = runtime.block_on(within_a_second("the writer", async {
        writing.await.expect("the writer's task")
    }));
    assert!(runtime
        .block_on(a.read_write_lock(&name).read_lock().try_lock_async())
        .expect("try")
        .is_none());
    runtime.block_on(writer.unlock_async()).expect("unlock");
}

pub fn semaphores_latches_and_elections_by_futures(env: &dyn TestEnv) {
    let runtime = service_runtime();
    let (a, b) = (env.client(), env.client());
    if keeps(env, LockKind::Semaphore) {
        let name = unique("async-semaphore");
        assert!(a.semaphore(&name).try_set_permits(2).expect("set"));
        let first = runtime
            .block_on(a.semaphore(&name).acquire_async())
            .expect("permit");
        let second = runtime
            .block_on(b.semaphore(&name).try_acquire_for_async(env.unit()))
            .expect("permit")
            .expect("a second permit");
        let third = runtime.spawn(b.semaphore(&name).acquire_async());
        env.await_sleepers(1);
        assert!(!third.is_finished(), "both permits taken");
        runtime.block_on(first.release_async()).expect("release");
        let third = runtime.block_on(within_a_second("the third permit", async {
            third.await.expect("the task")
        }));
        drop(second);
        runtime.block_on(async move { drop(third) });
        let all = runtime.block_on(within_a_second("both permits back", async {
            let one = a.semaphore(&name).acquire_async().await?;
            let two = a.semaphore(&name).acquire_async().await?;
            Ok((one, two))
        }));
        drop(all);
    }
    if keeps(env, LockKind::Latch) {
        let name = unique("async-latch");
        assert!(a.count_down_latch(&name).try_set_count(2).expect("set"));
        let waiting = runtime.spawn(b.count_down_latch(&name).wait_async());
        env.await_sleepers(1);
        a.count_down_latch(&name).count_down().expect("count down");
        assert!(!waiting.is_finished(), "one count left");
        assert_eq!(b.count_down_latch(&name).count().expect("count"), 1);
        a.count_down_latch(&name).count_down().expect("count down");
        runtime.block_on(within_a_second("the latch's waiter", async {
            waiting.await.expect("the task")
        }));
    }
    if keeps(env, LockKind::Election) {
        let name = unique("async-election");
        let leading = runtime
            .block_on(a.leader_election(&name).campaign_async("node-a"))
            .expect("campaign");
        let next = runtime.spawn(b.leader_election(&name).campaign_async("node-b"));
        env.await_sleepers(1);
        assert_eq!(
            b.leader_election(&name)
                .leader()
                .expect("leader")
                .as_deref(),
            Some("node-a")
        );
        let first = leading.token();
        runtime.block_on(leading.resign_async()).expect("resign");
        let next = runtime.block_on(within_a_second("the next leader", async {
            next.await.expect("the task")
        }));
        assert!(next.token() > first);
        assert_eq!(next.candidate(), "node-b");
        let empty = runtime.block_on(a.leader_election(&name).campaign_async(""));
        assert!(empty.expect_err("an empty candidate").is_invalid_argument());
        runtime.block_on(next.resign_async()).expect("resign");
    }
}
