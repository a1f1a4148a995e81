//! The test harness's process control (`redis-server` and PostgreSQL processes, the proxy),
//! shared with the workspace's tests.

pub use dlock_test_support::{
    cluster, etcd_server, network, postgres_server, redis_server, sentinel, tcp_proxy,
};
