//! The lease rule and exclusion, checked after every step of random operation sequences on a
//! real Redis server (short leases, real time; faults injected by `FaultyBackend` as real
//! delays, failed calls, lost replies, steps held back and sent twice), on a master whose
//! replica is paused and resumed at random steps (replica acknowledgement on), and through a
//! network that holds requests back and delivers them late or in reverse, and holds back the
//! server's messages (a TCP proxy in front of the server). See `support::lease_model`;
//! `DLOCK_MODEL_SEED=<seed>` replays one sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::redis::RedisBackend;
use dlocks::testing::FaultyBackend;
use support::lease_model::{self, Model, Store};
use support::redis_server::RedisServer;
use support::tcp_proxy::TcpProxy;

fn model(steps: usize) -> Model {
    let ms = Duration::from_millis;
    Model {
        watchdog: ms(600),
        short_lease: ms(200),
        long_lease: ms(3000),
        wait: ms(300),
        advances: vec![ms(0), ms(0), ms(50), ms(250), ms(700)],
        delays: vec![ms(20), ms(150), ms(700)],
        steps,
        parallel: 4,
        // A loaded machine may keep the watchdog off the CPU for a while.
        loss_slack: Duration::from_secs(1),
        hold_back: &["redisson_unlock_latch", "EVALSHA", ""],
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
fn random_sequences_through_a_network_that_holds_back_and_reorders_keep_the_rules() {
    let server = RedisServer::start();
    let proxy = Arc::new(TcpProxy::start(server.port()));
    let through_proxy = || {
        RedisBackend::builder(&proxy.url())
            .response_timeout(Duration::from_millis(250))
            .build()
            .expect("connect through the proxy")
    };
    lease_model::run(
        &model(12),
        &lease_model::seeds(100),
        &|seed| Store {
            faulty: FaultyBackend::new(through_proxy()),
            raw: Arc::new(server.backend()),
            clock: None,
            prefix: format!("model-net:{seed}"),
            proxy: Some(proxy.clone()),
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

/// A Redis server held to the protocol model answer by answer (see
/// `support::differential`), through a network that cuts replies (the backend sends a step
/// again, or says it does not know) and holds requests up, delivering them late.
#[test]
fn redis_answers_as_the_protocol_model_through_a_faulty_network() {
    let server = RedisServer::start();
    let proxy = Arc::new(TcpProxy::start(server.port()));
    let backend = RedisBackend::builder(&proxy.url())
        .response_timeout(Duration::from_millis(250))
        .build()
        .expect("connect through the proxy");
    support::differential::run(
        &support::differential::ProxyTarget::new(
            "redis",
            Arc::new(backend),
            proxy,
            Duration::from_millis(200),
        ),
        support::differential::Bounds {
            sequences: 20,
            steps: 50,
        },
    );
}
