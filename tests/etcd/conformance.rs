//! The conformance suite on etcd (a cluster of its own per test): every lock kind and every
//! synchronizer, on one member and on three.

mod single {
    use dlock_test_support as support;
    use dlock_test_support::conformance_suite;

    conformance_suite!(support::etcd_server::EtcdEnv::single);
}

mod three_members {
    use dlock_test_support as support;
    use dlock_test_support::conformance_suite;

    conformance_suite!(support::etcd_server::EtcdEnv::three);
}
