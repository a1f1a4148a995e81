//! A step across several Redis servers (RedLock), several names (MultiLock) or several masters
//! of a cluster starts no thread: requests go out on every connection first and the replies are
//! read as they come.
//!
//! This file holds one test on purpose: it counts the threads of the whole test process, so no
//! other test may run beside it.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dlocks::redis::RedLockBackend;
use dlocks::{LockClient, MultiLock};
use support::cluster::ClusterSetup;
use support::redis_server::RedisServer;

/// The threads of this process, as the kernel lists them.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task lists the process's threads")
        .count()
}

/// Runs `work` while another thread reads the thread count as often as it can; returns the
/// highest count seen.
fn most_threads_during(work: impl FnOnce()) -> usize {
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (done, most) = (done.clone(), most.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                most.fetch_max(threads(), Ordering::Relaxed);
            }
        })
    };
    // Let the sampler count itself once before the work starts.
    while most.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    work();
    done.store(true, Ordering::Release);
    sampler.join().expect("the sampler");
    most.load(Ordering::Relaxed)
}

#[test]
fn red_lock_multi_lock_and_cluster_steps_start_no_thread() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let cluster = ClusterSetup::start(3, 0);
    let on_cluster = LockClient::new(cluster.backend_builder().build().expect("the cluster"));
    let red_lock = LockClient::new(
        RedLockBackend::new(servers.iter().map(RedisServer::backend).collect())
            .expect("a RedLock over three servers"),
    );
    let single = LockClient::new(servers[0].backend());
    let quorum_lock = red_lock.lock("threads:red-lock");
    let multi = MultiLock::new((0..5).map(|i| single.lock(format!("threads:multi:{i}"))));
    // One name per master: the multi-lock's steps go to the three masters at once.
    let per_master = cluster.name_on_each_master("threads:cluster:");
    let across_masters = MultiLock::new(per_master.iter().map(|name| on_cluster.lock(name)));
    let lease = Duration::from_secs(10);
    let pairs = |count: usize| {
        for _ in 0..count {
            quorum_lock
                .lock_with_lease(lease)
                .expect("RedLock lock")
                .unlock()
                .expect("RedLock unlock");
            multi
                .lock_with_lease(lease)
                .expect("multi lock")
                .unlock()
                .expect("multi unlock");
            across_masters
                .lock_with_lease(lease)
                .expect("cluster multi lock")
                .unlock()
                .expect("cluster multi unlock");
        }
    };
    // Whatever the clients start once (pools, their helpers) starts here.
    pairs(50);
    let before = threads();
    let most = most_threads_during(|| pairs(300));
    assert_eq!(
        most,
        before + 1,
        "threads during 300 RedLock, multi-lock and cluster multi-lock pairs: at most {most}, \
         {before} before (and the sampler)"
    );
}
