//! The in-process memory backend: the conformance suite on a manual clock and on the system
//! clock, what only virtual time can show, and a client's local wait queue; and the tests' TCP
//! proxy, which needs no server either.

mod async_surface;
mod manual;
mod proxy;
mod real;
mod wait_queue;
