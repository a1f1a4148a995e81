//! Sentinel, Cluster and RedLock held to the protocol model answer by answer (see
//! `dlock_test_support::differential`), their calls meeting `FaultyBackend`'s faults (replies
//! lost, steps held up and delivered late): the same store rules whatever the topology.

#![cfg(feature = "redis")]

use std::time::Duration;

use dlock_test_support as support;
use support::differential::{self, Bounds, FaultyTarget};
use support::env::TestEnv;

const BOUNDS: Bounds = Bounds {
    sequences: 10,
    steps: 50,
};

fn check(name: &'static str, env: &dyn TestEnv) {
    differential::run(
        &FaultyTarget::new(name, env.backend(), Duration::from_millis(200)),
        BOUNDS,
    );
}

#[test]
fn sentinel_answers_as_the_protocol_model() {
    check("sentinel", &support::sentinel::SentinelEnv::start());
}

#[test]
fn a_cluster_answers_as_the_protocol_model() {
    check("cluster", &support::cluster::ClusterEnv::start());
}

#[test]
fn a_red_lock_answers_as_the_protocol_model() {
    check("redlock", &support::redis_server::RedLockEnv::start());
}
