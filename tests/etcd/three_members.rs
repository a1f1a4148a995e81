//! The conformance suite on a cluster of three etcd members of its own per test: every lock
//! kind and every synchronizer, with the writes replicated by consensus (the cases under load
//! run on one member, in `conformance`).

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(shared support::etcd_server::EtcdEnv::three, replicated);
