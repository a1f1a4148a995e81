//! Loopback ports for the servers tests start.

use std::net::TcpListener;

/// A loopback port nothing listens on now (the system's pick; a server started on it may
/// still lose it to another process, which the harnesses retry).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}
