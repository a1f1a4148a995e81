//! The lease model and the differential test on a server backend, through its [`ServerEnv`]
//! harness: the sequences reach the server through a network (a TCP proxy) that holds requests
//! back and delivers them late or in reverse, cuts replies, and holds back the server's
//! messages. Run on each server backend by [`lease_model_suite!`](crate::lease_model_suite).

use std::sync::Arc;
use std::time::Duration;

use dlocks::testing::FaultyBackend;

use super::{Model, Store};
use crate::differential::{self, Bounds, ProxyTarget};
use crate::server_cases::{ServerEnv, Timeouts};
use crate::tcp_proxy::TcpProxy;

/// A server backend's scale for the lease model and the differential test (its harness's
/// [`ServerEnv::lease_model`]).
pub struct ServerModel {
    /// The lease model's durations and steps.
    pub model: Model,
    /// How many sequences run through the faulty network.
    pub network_sequences: u64,
    /// The timeouts of the lease model's backends through the network; `None` where the
    /// checks must read through the clients' own backend, because only it knows until when
    /// its holds count (etcd ends a lease up to a second and a half after it ran out): the
    /// sequences' faults are then `FaultyBackend`'s alone, in process.
    pub network: Option<Timeouts>,
    /// The timeouts of the differential test's backend through the network.
    pub differential: Timeouts,
    /// The short lease of the differential test's sequences.
    pub differential_short_lease: Duration,
}

/// Random sequences through a network that holds requests back and delivers them late or in
/// reverse, and holds back the server's messages, keep the lease rule and exclusion.
pub fn random_sequences_through_a_faulty_network_keep_the_rules<E: ServerEnv>() {
    let scale = E::lease_model();
    let server = E::start();
    let Some(network) = scale.network else {
        let backend = server.backend_with(Timeouts::default());
        super::run(
            &scale.model,
            &super::seeds(scale.network_sequences),
            &|seed| Store {
                faulty: FaultyBackend::new(backend.clone()),
                raw: backend.clone(),
                clock: None,
                prefix: format!("model:{seed}"),
                proxy: None,
            },
            None,
        );
        return;
    };
    let proxy = Arc::new(TcpProxy::start(server.port()));
    super::run(
        &scale.model,
        &super::seeds(scale.network_sequences),
        &|seed| Store {
            faulty: FaultyBackend::new(server.backend_through(&proxy, network)),
            raw: server.backend_with(Timeouts::default()),
            clock: None,
            prefix: format!("model-net:{seed}"),
            proxy: Some(proxy.clone()),
        },
        None,
    );
}

/// The server held to the protocol model answer by answer (see
/// [`differential`](crate::differential)), through a network that cuts replies (the backend
/// sends a step again, or says it does not know) and holds requests up, delivering them late.
pub fn answers_as_the_protocol_model_through_a_faulty_network<E: ServerEnv>() {
    let scale = E::lease_model();
    let server = E::start();
    server.warm();
    let proxy = Arc::new(TcpProxy::start(server.port()));
    let backend = server.backend_through(&proxy, scale.differential);
    differential::run(
        &server.differential_target(ProxyTarget::new(
            E::NAME,
            backend,
            proxy,
            scale.differential_short_lease,
        )),
        Bounds {
            sequences: 20,
            steps: 50,
        },
    );
}

/// Instantiates the lease model and the differential test for the server harness `$server`, a
/// type implementing [`ServerEnv`](crate::server_cases::ServerEnv).
#[macro_export]
macro_rules! lease_model_suite {
    ($server:ty) => {
        #[test]
        fn random_sequences_through_a_faulty_network_keep_the_rules() {
            $crate::lease_model::random_sequences_through_a_faulty_network_keep_the_rules::<
                $server,
            >();
        }

        #[test]
        fn answers_as_the_protocol_model_through_a_faulty_network() {
            $crate::lease_model::answers_as_the_protocol_model_through_a_faulty_network::<
                $server,
            >();
        }
    };
}
