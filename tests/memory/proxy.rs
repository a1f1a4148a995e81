//! The tests' TCP proxy lets go of a connection once it is over: a long run makes thousands
//! (every step sent again, every cancel request), and one whose sockets stayed open ran out of
//! file descriptors ("Too many open files") after twenty thousand.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::tcp_proxy::TcpProxy;

/// How many descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count())
}

#[test]
fn connections_that_ended_leave_no_socket_open() {
    const CONNECTIONS: usize = 200;
    let server = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("address").port();
    // Echoes one byte on each connection, then waits for its end.
    let echo = thread::spawn(move || {
        for _ in 0..CONNECTIONS {
            let Ok((mut connection, _)) = server.accept() else {
                return;
            };
            let mut byte = [0u8; 1];
            if connection.read_exact(&mut byte).is_ok() && connection.write_all(&byte).is_ok() {
                let _ = connection.read(&mut byte);
            }
        }
    });
    let proxy = TcpProxy::start(port);
    let before = open_descriptors();
    for _ in 0..CONNECTIONS {
        let mut connection = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
        connection.write_all(b"x").expect("write");
        let mut byte = [0u8; 1];
        connection.read_exact(&mut byte).expect("the echo");
        assert_eq!(&byte, b"x");
    }
    echo.join().expect("the echo server");
    // Each connection's pumps end once both sides have closed; bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_descriptors() > before + 20 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let after = open_descriptors();
    assert!(
        after <= before + 20,
        "{CONNECTIONS} connections over, and {} more descriptors open than before them",
        after - before
    );
}
