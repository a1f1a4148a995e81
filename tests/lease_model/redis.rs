//! The lease rule and exclusion, checked after every step of random operation sequences on a
//! real Redis server, in Redis's own settings (the runs through a faulty network, and the
//! differential test, are `lease_model_suite!`'s in the `redis_single` binary): directly (short
//! leases, real time; faults injected by `FaultyBackend` as real delays, failed calls, lost
//! replies, steps held back and sent twice), and on a master whose replica is paused and
//! resumed at random steps (replica acknowledgement on). See `support::lease_model`;
//! `DLOCK_MODEL_SEED=<seed>` replays one sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::testing::FaultyBackend;
use support::lease_model::{self, Model, Store};
use support::redis_server::RedisServer;
use support::server_cases::ServerEnv;

/// The harness's lease model with `steps` steps.
fn model(steps: usize) -> Model {
    Model {
        steps,
        ..RedisServer::lease_model().model
    }
}

#[test]
fn random_sequences_on_redis_keep_the_lease_rule() {
    let server = RedisServer::start();
    lease_model::run(
        &model(10),
        &lease_model::seeds(200),
        &|seed| Store {
            faulty: FaultyBackend::new(server.backend()),
            raw: Arc::new(server.backend()),
            clock: None,
            prefix: format!("model:{seed}"),
            proxy: None,
        },
        None,
    );
}

#[test]
fn random_sequences_with_a_paused_replica_keep_the_lease_rule() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    master.await_online_replicas(1);
    let backend = || {
        master
            .backend_builder()
            .replica_sync_timeout(Duration::from_millis(200))
            .build()
            .expect("connect to the master")
    };
    let pause = |paused: bool| {
        if paused {
            replica.pause();
        } else {
            replica.resume();
        }
    };
    lease_model::run(
        &model(12),
        &lease_model::seeds(40),
        &|seed| Store {
            faulty: FaultyBackend::new(backend()),
            raw: Arc::new(backend()),
            clock: None,
            prefix: format!("model-replica:{seed}"),
            proxy: None,
        },
        Some(&pause),
    );
}
