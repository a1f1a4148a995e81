//! The lease rule and exclusion, checked after every step of random operation sequences on a
//! real PostgreSQL server, directly and through a network that holds requests back and
//! delivers them late or in reverse, and holds back the server's notifications (a TCP proxy in
//! front of the server). See `support::lease_model`; `DLOCK_MODEL_SEED=<seed>` replays one
//! sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::postgres::PostgresBackend;
use dlocks::testing::FaultyBackend;
use support::lease_model::{self, Model, Store};
use support::postgres_server::PostgresServer;
use support::tcp_proxy::TcpProxy;

fn model(steps: usize) -> Model {
    let ms = Duration::from_millis;
    Model {
        watchdog: ms(900),
        short_lease: ms(300),
        long_lease: ms(3000),
        wait: ms(400),
        advances: vec![ms(0), ms(0), ms(50), ms(300), ms(900)],
        delays: vec![ms(20), ms(200), ms(900)],
        steps,
        parallel: 4,
        loss_slack: Duration::from_secs(1),
        hold_back: &[""],
    }
}

#[test]
fn random_sequences_on_postgres_through_a_faulty_network_keep_the_rules() {
    let server = PostgresServer::start();
    let proxy = Arc::new(TcpProxy::start(server.port()));
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let through_proxy = || {
        PostgresBackend::builder(&url)
            .connect_timeout(Duration::from_secs(2))
            .statement_timeout(Duration::from_millis(300))
            .checkout_timeout(Duration::from_secs(1))
            .build()
            .expect("connect through the proxy")
    };
    lease_model::run(
        &model(12),
        &lease_model::seeds(80),
        &|seed| Store {
            faulty: FaultyBackend::new(through_proxy()),
            raw: Arc::new(server.backend()),
            clock: None,
            prefix: format!("model-pg:{seed}"),
            proxy: Some(proxy.clone()),
        },
        None,
    );
}

/// A PostgreSQL server held to the protocol model answer by answer (see
/// `support::differential`), through a network that cuts replies (the backend sends a step
/// again on a new connection, or says it does not know) and holds requests up, delivering
/// them late.
#[test]
fn postgres_answers_as_the_protocol_model_through_a_faulty_network() {
    let server = PostgresServer::start();
    server.backend(); // the schema
    let proxy = Arc::new(TcpProxy::start(server.port()));
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let backend = PostgresBackend::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .statement_timeout(Duration::from_millis(500))
        .checkout_timeout(Duration::from_secs(1))
        .build()
        .expect("connect through the proxy");
    support::differential::run(
        &support::differential::ProxyTarget::new(
            "postgres",
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
