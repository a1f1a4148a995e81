//! etcd held to the protocol model answer by answer (see `dlock_test_support::differential`),
//! through a network that cuts replies (the backend sends a step again where it may, or says it
//! does not know) and holds requests up, delivering them late.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support as support;
use dlocks::etcd::EtcdBackend;
use support::differential::{self, Bounds, ProxyTarget};
use support::etcd_server::EtcdCluster;
use support::tcp_proxy::TcpProxy;

#[test]
fn etcd_answers_as_the_protocol_model_through_a_faulty_network() {
    let cluster = EtcdCluster::single();
    let proxy = Arc::new(TcpProxy::start(cluster.members()[0].client_port));
    let backend = EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_millis(500))
        .build()
        .expect("connect through the proxy");
    // The gateway carries keys in base64: a step's request names its lock by the key prefix
    // of the name (`<name>/`, whose length the sequences' names make a multiple of 3 bytes, so
    // its base64 is the start of every key's under it). A step reads before it writes; its own
    // request is the transaction that compares (a read compares nothing).
    let keys = backend.clone();
    let target = ProxyTarget::new("etcd", Arc::new(backend), proxy, Duration::from_secs(1))
        .with_needles(move |name| {
            vec![
                STANDARD.encode(keys.key_prefix(name)),
                r#""compare":[{"#.to_owned(),
            ]
        })
        // The backend gives up on a request held up past its timeout and closes the
        // connection; the gateway then cancels the request it had not run.
        .losing_held_requests();
    differential::run(
        &target,
        Bounds {
            sequences: 20,
            steps: 50,
        },
    );
}
