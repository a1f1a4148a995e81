//! dlock on real etcd members: the conformance suite on one member and on a cluster of three.

mod conformance;
