//! The in-process memory backend: the conformance suite on a manual clock and on the system
//! clock, what only virtual time can show, and a client's local wait queue.

mod async_surface;
mod manual;
mod real;
mod wait_queue;
