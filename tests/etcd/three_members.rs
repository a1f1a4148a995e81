//! The conformance suite on a cluster of three etcd members of its own per test: every lock
//! kind and every synchronizer, with the writes replicated by consensus.

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(shared support::etcd_server::EtcdEnv::three);
