//! A loopback TCP proxy in front of a test server that can cut a connection between a request
//! and its reply (the request reaches the server and takes effect, the reply never arrives),
//! hold all traffic (a partition: bytes wait in the proxy, and are dropped if the connections
//! are closed meanwhile) or only a pub/sub connection's, and be pointed at another server, as a
//! failover moves a service address.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

/// A proxy on a free loopback port forwarding to `127.0.0.1:<upstream>`.
pub struct TcpProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// The port new connections are forwarded to.
    upstream: AtomicU16,
    /// While set, nothing is forwarded either way.
    held: AtomicBool,
    /// A request containing these bytes gets its reply cut (once).
    cut_reply_to: Mutex<Option<Vec<u8>>>,
    cuts: AtomicUsize,
    /// Every socket opened, so dropping the proxy closes them all.
    sockets: Mutex<Vec<TcpStream>>,
    /// The hold switch of each connection that has sent `SUBSCRIBE` (a pub/sub connection).
    subscribers: Mutex<Vec<Arc<AtomicBool>>>,
}

impl TcpProxy {
    /// Starts forwarding to the server on `upstream`.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared::default());
        shared.upstream.store(upstream, Ordering::SeqCst);
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let upstream = shared.upstream.load(Ordering::SeqCst);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        continue;
                    };
                    connect(&shared, client, server);
                }
            })
        };
        TcpProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The next request whose bytes contain `needle` is passed on, and its connection is
    /// closed when the reply comes back instead of passing the reply on.
    pub fn cut_reply_to(&self, needle: &str) {
        *self.shared.cut_reply_to.lock() = Some(needle.as_bytes().to_vec());
    }

    /// Forwards new connections to `upstream` from now on, and closes every open one, as a
    /// failover that moves the service address leaves clients to reconnect.
    pub fn redirect(&self, upstream: u16) {
        self.shared.upstream.store(upstream, Ordering::SeqCst);
        for socket in self.shared.sockets.lock().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Holds every byte in both directions (`true`) or lets them flow again (`false`): a
    /// network partition between the two sides, whose connections stay open.
    pub fn hold_traffic(&self, held: bool) {
        self.shared.held.store(held, Ordering::SeqCst);
    }

    /// Holds every byte, both ways, of the connections that have subscribed so far, for good:
    /// a pub/sub connection that stops delivering (a half-open connection, a stalled
    /// middlebox) while command connections, and connections opened later, work.
    pub fn freeze_subscribers(&self) {
        for frozen in self.shared.subscribers.lock().iter() {
            frozen.store(true, Ordering::SeqCst);
        }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How many replies were cut.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

fn connect(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut sockets = shared.sockets.lock();
        for socket in [&client, &server] {
            if let Ok(socket) = socket.try_clone() {
                sockets.push(socket);
            }
        }
    }
    let cut_next_reply = Arc::new(AtomicBool::new(false));
    let frozen = Arc::new(AtomicBool::new(false));
    // Requests: forwarded; one that matches the needle arms the cut of its reply.
    {
        let shared = shared.clone();
        let cut = cut_next_reply.clone();
        let frozen = frozen.clone();
        let mut subscribed = false;
        std::thread::spawn(move || {
            pump(&shared.clone(), &frozen.clone(), client, server2, |bytes| {
                if !subscribed && bytes.windows(9).any(|window| window == b"SUBSCRIBE") {
                    subscribed = true;
                    shared.subscribers.lock().push(frozen.clone());
                }
                let mut needle = shared.cut_reply_to.lock();
                if let Some(wanted) = needle.as_deref() {
                    if bytes.windows(wanted.len()).any(|window| window == wanted) {
                        *needle = None;
                        cut.store(true, Ordering::SeqCst);
                    }
                }
                true
            })
        });
    }
    // Replies: forwarded, unless the cut is armed.
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            pump(&shared.clone(), &frozen, server, client2, |_| {
                if cut_next_reply.swap(false, Ordering::SeqCst) {
                    shared.cuts.fetch_add(1, Ordering::SeqCst);
                    return false;
                }
                true
            })
        });
    }
}

/// Copies `from` to `to` while `pass` approves each chunk; closes both when it refuses or
/// either side closes. Nothing moves while the proxy holds all traffic or this connection's.
fn pump(
    shared: &Shared,
    frozen: &AtomicBool,
    mut from: TcpStream,
    mut to: TcpStream,
    mut pass: impl FnMut(&[u8]) -> bool,
) {
    let mut buffer = [0u8; 16 * 1024];
    let held = || {
        (shared.held.load(Ordering::SeqCst) || frozen.load(Ordering::SeqCst))
            && !shared.stop.load(Ordering::SeqCst)
    };
    loop {
        // Held: read nothing, so the bytes wait (and go with the connection if it is closed).
        while held() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        while held() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A proxy stopped while holding drops what it held, as a partition that never heals.
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        if !pass(&buffer[..read]) || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor from `accept`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in self.shared.sockets.lock().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}
