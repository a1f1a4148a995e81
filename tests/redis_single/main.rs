//! dlock on real `redis-server` processes, one (or two) per test: the conformance suite, the
//! raw layout, every Lua step, pub/sub, latches, faults, events, ACLs, TLS, Redisson compatibility, and several
//! OS processes sharing one server.

mod acl;
mod async_surface;
mod conformance;
mod events;
mod family_processes;
mod faults;
mod fenced;
mod forged_grants;
mod handoff;
mod latch;
mod layout;
mod multi;
mod processes;
mod pubsub;
mod redisson_compat;
mod script_reload;
mod scripts;
mod synchronizer_processes;
mod tls;
mod turns;
mod watchdog;
