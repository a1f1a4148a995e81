//! dlock on real PostgreSQL servers, one (or two) per test: the conformance suite, the schema,
//! latches, faults, failover, TLS, several OS processes sharing one server, and multi-locks
//! across PostgreSQL and Redis.

mod async_surface;
mod conformance;
mod failover;
mod faults;
mod forged_grants;
mod latch;
mod multi;
mod processes;
mod runtime;
mod schema;
mod synchronizer_processes;
mod tls;
