//! A loopback TCP proxy in front of a test server, playing the network's faults: it can cut a
//! connection between a request and its reply (the request reaches the server and takes
//! effect, the reply never arrives), hold all traffic (a partition: bytes wait in the proxy,
//! and are dropped if the connections are closed meanwhile) or a pub/sub connection's, be
//! pointed at another server (as a failover moves a service address), delay every byte, and
//! hold back requests: a request held back reaches the server only when the test delivers it,
//! even after its client gave up and closed the connection (as bytes already sent still arrive
//! after a `close`), in the order they were held or in reverse.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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
    cut_reply_to: Mutex<Option<Vec<Vec<u8>>>>,
    cuts: AtomicUsize,
    /// The next request containing these bytes (any request, if empty) is held back, with what
    /// follows it on its connection.
    hold_next: Mutex<Option<Vec<Vec<u8>>>>,
    /// `hold_next` stays set once met: every such request is held back.
    hold_every: AtomicBool,
    /// Requests held back, in the order they were held: the connection and the bytes.
    held_back: Mutex<Vec<(Arc<Link>, Vec<u8>)>>,
    /// Every byte waits this long (µs) before it is forwarded.
    delay_micros: AtomicU64,
    /// While set, what the server sends to connections that have subscribed waits.
    subscribers_held: AtomicBool,
    /// While set, what the server sends to connections whose subscription contained these
    /// bytes waits.
    subscriptions_held: Mutex<Option<Vec<u8>>>,
    /// Every open connection's sockets, by its link's id, so that dropping the proxy (or
    /// severing the links) closes them all. A connection's leave once it is over: kept, their
    /// descriptors would stay open for the proxy's life (a long comparison run opened twenty
    /// thousand).
    sockets: Mutex<Vec<(u64, TcpStream)>>,
    /// The id of the next link.
    next_link: AtomicU64,
    /// Requests containing these bytes are kept (a copy) in `recorded` as they pass.
    record: Mutex<Option<Vec<u8>>>,
    recorded: Mutex<Vec<Vec<u8>>>,
    /// The hold switch of each connection that has sent `SUBSCRIBE` or `LISTEN` (a pub/sub
    /// connection), or opened an etcd watch.
    subscribers: Mutex<Vec<Arc<AtomicBool>>>,
}

/// One proxied connection's server side, as the request pump and a delivery share it.
struct Link {
    /// Its sockets' key in `Shared::sockets`.
    id: u64,
    /// The pumps (requests, replies) that have ended: at two, and with nothing held back to
    /// deliver, the connection is over.
    pumps_ended: AtomicU8,
    server: Mutex<TcpStream>,
    /// Its requests are being held back: later ones queue behind the first.
    holding: AtomicBool,
    /// The client closed its side: once what was held is delivered, the server side closes.
    client_gone: AtomicBool,
    /// Chunks the server has sent on it: a delivery waits for its answer.
    replies: AtomicU64,
    /// Its replies are no longer read (the server side closed, or the client's did and a
    /// reply found it gone): a delivery does not wait for an answer that cannot be seen.
    deaf: AtomicBool,
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
        self.cut_reply_to_all(&[needle]);
    }

    /// As [`cut_reply_to`](Self::cut_reply_to), for the next request that contains every one
    /// of `needles`.
    pub fn cut_reply_to_all(&self, needles: &[&str]) {
        *self.shared.cut_reply_to.lock() = Some(owned(needles));
    }

    /// The next request whose bytes contain `needle` (`""`: the next request at all) is held
    /// back in the proxy, with everything its client sends after it on that connection, until
    /// [`deliver_held`](Self::deliver_held): its client waits for a reply that does not come.
    pub fn hold_back_next(&self, needle: &str) {
        self.hold_back_next_all(&[needle]);
    }

    /// As [`hold_back_next`](Self::hold_back_next), for the next request that contains every
    /// one of `needles`.
    pub fn hold_back_next_all(&self, needles: &[&str]) {
        let mut next = self.shared.hold_next.lock();
        self.shared.hold_every.store(false, Ordering::SeqCst);
        *next = Some(owned(needles));
    }

    /// As [`hold_back_next`](Self::hold_back_next), for the next request that contains the
    /// bytes `needle` (a binary message: PostgreSQL's cancel request, say).
    pub fn hold_back_next_bytes(&self, needle: &[u8]) {
        let mut next = self.shared.hold_next.lock();
        self.shared.hold_every.store(false, Ordering::SeqCst);
        *next = Some(vec![needle.to_vec()]);
    }

    /// As [`hold_back_next_all`](Self::hold_back_next_all), for every request that contains
    /// every one of `needles`, on any connection, until
    /// [`stop_holding_back`](Self::stop_holding_back): a request sent again is held back too.
    pub fn hold_back_every(&self, needles: &[&str]) {
        let mut next = self.shared.hold_next.lock();
        self.shared.hold_every.store(true, Ordering::SeqCst);
        *next = Some(owned(needles));
    }

    /// Holds back no more requests (a hold asked for and not met yet is dropped); those held
    /// back stay held until delivered.
    pub fn stop_holding_back(&self) {
        let mut next = self.shared.hold_next.lock();
        self.shared.hold_every.store(false, Ordering::SeqCst);
        *next = None;
    }

    /// Drops a reply cut asked for and not met yet.
    pub fn stop_cutting(&self) {
        *self.shared.cut_reply_to.lock() = None;
    }

    /// Sends every request held back to the server, in the order they were held, and waits
    /// (bounded) until the server has answered each connection; returns how many requests. A
    /// connection whose client has closed meanwhile is closed after its requests.
    pub fn deliver_held(&self) -> usize {
        self.deliver(false)
    }

    /// As [`deliver_held`](Self::deliver_held), newest first: a network that reorders (each
    /// connection's own requests still in their order, as TCP keeps them).
    pub fn deliver_held_in_reverse(&self) -> usize {
        self.deliver(true)
    }

    /// Writes every held request to its server (each connection's requests in order; the
    /// connections newest first when `reverse`) and lets its connection pass again, all under
    /// the lock the request pumps hold while they hold a request back: a request its client
    /// sends meanwhile goes after the delivered ones, never stays behind. Then waits (bounded)
    /// until the server has answered each connection.
    fn deliver(&self, reverse: bool) -> usize {
        // Each link and the replies it had seen, `None` where the write failed (no answer comes).
        let mut done: Vec<(Arc<Link>, Option<u64>)> = Vec::new();
        let count = {
            let mut held_back = self.shared.held_back.lock();
            let held = std::mem::take(&mut *held_back);
            let mut links: Vec<Arc<Link>> = Vec::new();
            for (link, _) in &held {
                if !links.iter().any(|known| Arc::ptr_eq(known, link)) {
                    links.push(link.clone());
                }
            }
            if reverse {
                links.reverse();
            }
            for link in &links {
                let before = link.replies.load(Ordering::SeqCst);
                let mut written = true;
                for (owner, bytes) in &held {
                    if Arc::ptr_eq(owner, link) {
                        written &= link.server.lock().write_all(bytes).is_ok();
                    }
                }
                done.push((link.clone(), written.then_some(before)));
                link.holding.store(false, Ordering::SeqCst);
            }
            held.len()
        };
        let limit = std::time::Instant::now() + Duration::from_secs(5);
        for (link, before) in &done {
            let Some(before) = *before else { continue };
            while link.replies.load(Ordering::SeqCst) == before
                && !link.deaf.load(Ordering::SeqCst)
                && std::time::Instant::now() < limit
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for (link, _) in done {
            if link.client_gone.load(Ordering::SeqCst) {
                let _ = link.server.lock().shutdown(Shutdown::Write);
            }
            // Both pumps ended while it held requests back.
            if link.pumps_ended.load(Ordering::SeqCst) >= 2 {
                self.shared.forget(link.id);
            }
        }
        count
    }

    /// From now on, keeps a copy of each request whose bytes contain `needle` (`""`: every
    /// request) as it passes, for [`recorded`](Self::recorded); what was kept before is
    /// dropped.
    pub fn record_requests(&self, needle: &str) {
        *self.shared.record.lock() = Some(needle.as_bytes().to_vec());
        self.shared.recorded.lock().clear();
    }

    /// The requests kept since [`record_requests`](Self::record_requests), in the order they
    /// came (each as the proxy read it: a request the client wrote in parts may come in parts).
    pub fn recorded(&self) -> Vec<Vec<u8>> {
        self.shared.recorded.lock().clone()
    }

    /// How many requests are held back now.
    pub fn held_back(&self) -> usize {
        self.shared.held_back.lock().len()
    }

    /// Every byte, both ways, waits `delay` in the proxy before it goes on (zero: none).
    pub fn delay(&self, delay: Duration) {
        self.shared.delay_micros.store(
            u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Forwards new connections to `upstream` from now on, and closes every open one, as a
    /// failover that moves the service address leaves clients to reconnect.
    pub fn redirect(&self, upstream: u16) {
        self.shared.upstream.store(upstream, Ordering::SeqCst);
        self.sever();
    }

    /// Closes every open connection, both ways, whatever is in flight on it: a reset by the
    /// network (a middlebox that dropped its state, a restarted router). A request the server
    /// is still working on goes on there; its client sees its connection fail at once.
    pub fn sever(&self) {
        for (_, socket) in self.shared.sockets.lock().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Holds every byte in both directions (`true`) or lets them flow again (`false`): a
    /// network partition between the two sides, whose connections stay open.
    pub fn hold_traffic(&self, held: bool) {
        self.shared.held.store(held, Ordering::SeqCst);
    }

    /// Holds what the server sends to connections that have subscribed (`true`), or lets it
    /// flow again (`false`): a store's messages arriving late.
    pub fn hold_subscriber_messages(&self, held: bool) {
        self.shared.subscribers_held.store(held, Ordering::SeqCst);
    }

    /// Holds what the server sends to the connections whose subscription (the request that
    /// opened it: an etcd watch of one key range, say) contains `needle`, or lets it flow again
    /// (`None`): one stream's messages arriving late while the client's other streams, and its
    /// calls, are on time.
    pub fn hold_subscription_messages(&self, needle: Option<&str>) {
        *self.shared.subscriptions_held.lock() = needle.map(|needle| needle.as_bytes().to_vec());
    }

    /// Holds every byte, both ways, of the connections that have subscribed so far, for good:
    /// a pub/sub connection that stops delivering (a half-open connection, a stalled
    /// middlebox) while command connections, and connections opened later, work.
    pub fn freeze_subscribers(&self) {
        for frozen in self.shared.subscribers.lock().iter() {
            frozen.store(true, Ordering::SeqCst);
        }
    }

    /// How many connections have subscribed (sent `SUBSCRIBE` or `LISTEN`, or opened an etcd
    /// watch) so far.
    pub fn subscribers(&self) -> usize {
        self.shared.subscribers.lock().len()
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

/// Writes held requests to their connections' servers, waiting (bounded) for each
/// connection's answer; closes a connection whose client left once its last request is written.
fn connect(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let (Ok(client2), Ok(server2), Ok(server3)) =
        (client.try_clone(), server.try_clone(), server.try_clone())
    else {
        return;
    };
    let id = shared.next_link.fetch_add(1, Ordering::SeqCst);
    {
        let mut sockets = shared.sockets.lock();
        for socket in [&client, &server] {
            if let Ok(socket) = socket.try_clone() {
                sockets.push((id, socket));
            }
        }
    }
    let link = Arc::new(Link {
        id,
        pumps_ended: AtomicU8::new(0),
        server: Mutex::new(server3),
        holding: AtomicBool::new(false),
        client_gone: AtomicBool::new(false),
        replies: AtomicU64::new(0),
        deaf: AtomicBool::new(false),
    });
    let cut_next_reply = Arc::new(AtomicBool::new(false));
    let frozen = Arc::new(AtomicBool::new(false));
    let subscribed = Arc::new(AtomicBool::new(false));
    // The request that subscribed the connection.
    let subscription = Arc::new(Mutex::new(Vec::new()));
    // Requests: forwarded; one that matches a needle arms the cut of its reply, or is held back.
    {
        let shared = shared.clone();
        let cut = cut_next_reply.clone();
        let frozen = frozen.clone();
        let subscribed = subscribed.clone();
        let subscription = subscription.clone();
        let link = link.clone();
        std::thread::spawn(move || {
            let closed_by = pump(&shared.clone(), &frozen.clone(), client, server2, |bytes| {
                // Redis's SUBSCRIBE, PostgreSQL's LISTEN, etcd's watch.
                if !subscribed.load(Ordering::SeqCst)
                    && (bytes.windows(9).any(|window| window == b"SUBSCRIBE")
                        || bytes.windows(7).any(|window| window == b"LISTEN ")
                        || bytes.windows(15).any(|window| window == b"POST /v3/watch "))
                {
                    *subscription.lock() = bytes.to_vec();
                    subscribed.store(true, Ordering::SeqCst);
                    shared.subscribers.lock().push(frozen.clone());
                }
                if let Some(wanted) = shared.record.lock().as_deref() {
                    if contains_all(bytes, &[wanted.to_vec()]) {
                        shared.recorded.lock().push(bytes.to_vec());
                    }
                }
                {
                    let mut needle = shared.cut_reply_to.lock();
                    if let Some(wanted) = needle.as_deref() {
                        if contains_all(bytes, wanted) {
                            *needle = None;
                            cut.store(true, Ordering::SeqCst);
                        }
                    }
                }
                // Decided and kept under the lock a delivery holds (see `deliver`).
                let mut held_back = shared.held_back.lock();
                if !link.holding.load(Ordering::SeqCst) {
                    let mut next = shared.hold_next.lock();
                    let matched = next
                        .as_deref()
                        .is_some_and(|wanted| contains_all(bytes, wanted));
                    if matched {
                        if !shared.hold_every.load(Ordering::SeqCst) {
                            *next = None;
                        }
                        link.holding.store(true, Ordering::SeqCst);
                    }
                }
                if link.holding.load(Ordering::SeqCst) {
                    held_back.push((link.clone(), bytes.to_vec()));
                    return Pass::Keep;
                }
                Pass::Forward
            });
            if closed_by == Closed::Source {
                // The client is gone: its held requests still reach the server when delivered.
                link.client_gone.store(true, Ordering::SeqCst);
            }
            if closed_by == Closed::Other || !link.holding.load(Ordering::SeqCst) {
                let _ = link.server.lock().shutdown(Shutdown::Both);
            }
            pump_ended(&shared, &link);
        });
    }
    // Replies: forwarded, unless the cut is armed; held while subscriber messages are held.
    {
        let shared = shared.clone();
        let link = link.clone();
        std::thread::spawn(move || {
            let subscribers_held = || {
                subscribed.load(Ordering::SeqCst)
                    && (shared.subscribers_held.load(Ordering::SeqCst)
                        || shared
                            .subscriptions_held
                            .lock()
                            .as_deref()
                            .is_some_and(|needle| {
                                contains_all(&subscription.lock(), &[needle.to_vec()])
                            }))
            };
            let client3 = client2.try_clone();
            pump_while(
                &shared.clone(),
                &frozen,
                &subscribers_held,
                server,
                client2,
                |_| {
                    link.replies.fetch_add(1, Ordering::SeqCst);
                    if cut_next_reply.swap(false, Ordering::SeqCst) {
                        shared.cuts.fetch_add(1, Ordering::SeqCst);
                        return Pass::Cut;
                    }
                    Pass::Forward
                },
            );
            link.deaf.store(true, Ordering::SeqCst);
            // The server side ended or the reply was cut: the client sees its connection close.
            if let Ok(client) = client3 {
                let _ = client.shutdown(Shutdown::Both);
            }
            pump_ended(&shared, &link);
        })
    };
}

/// One of `link`'s two pumps ended: once both have, the connection is over and its sockets
/// are let go, unless requests are held back on it (a delivery lets them go once it wrote
/// them).
fn pump_ended(shared: &Shared, link: &Link) {
    if link.pumps_ended.fetch_add(1, Ordering::SeqCst) + 1 >= 2
        && !link.holding.load(Ordering::SeqCst)
    {
        shared.forget(link.id);
    }
}

impl Shared {
    /// Lets go of the sockets of link `id`.
    fn forget(&self, id: u64) {
        self.sockets.lock().retain(|(link, _)| *link != id);
    }
}

/// What happens to a chunk of bytes.
enum Pass {
    Forward,
    /// Kept by the proxy (held back): not written now.
    Keep,
    /// The connection is closed instead.
    Cut,
}

/// Which side ended a pump.
#[derive(PartialEq, Eq)]
enum Closed {
    Source,
    Other,
}

fn pump(
    shared: &Shared,
    frozen: &AtomicBool,
    from: TcpStream,
    to: TcpStream,
    pass: impl FnMut(&[u8]) -> Pass,
) -> Closed {
    pump_while(shared, frozen, &|| false, from, to, pass)
}

/// Copies `from` to `to` as `pass` says for each chunk; stops when it cuts or either side
/// closes (closing `from` too; `to` is the caller's to close). Nothing moves while the proxy
/// holds all traffic or this connection's, or while `also_held`.
fn pump_while(
    shared: &Shared,
    frozen: &AtomicBool,
    also_held: &dyn Fn() -> bool,
    mut from: TcpStream,
    mut to: TcpStream,
    mut pass: impl FnMut(&[u8]) -> Pass,
) -> Closed {
    let mut buffer = [0u8; 16 * 1024];
    let held = || {
        (shared.held.load(Ordering::SeqCst) || frozen.load(Ordering::SeqCst) || also_held())
            && !shared.stop.load(Ordering::SeqCst)
    };
    let closed = loop {
        // Held: read nothing, so the bytes wait (and go with the connection if it is closed).
        while held() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break Closed::Source,
            Ok(read) => read,
        };
        let delay = shared.delay_micros.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        while held() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // A proxy stopped while holding drops what it held, as a partition that never heals.
        if shared.stop.load(Ordering::SeqCst) {
            break Closed::Other;
        }
        match pass(&buffer[..read]) {
            Pass::Forward => {
                if to.write_all(&buffer[..read]).is_err() {
                    break Closed::Other;
                }
            }
            Pass::Keep => {}
            Pass::Cut => break Closed::Other,
        }
    };
    let _ = from.shutdown(Shutdown::Both);
    if closed == Closed::Other {
        let _ = to.shutdown(Shutdown::Both);
    }
    closed
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor from `accept`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.shared.held_back.lock().clear();
        for (_, socket) in self.shared.sockets.lock().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn owned(needles: &[&str]) -> Vec<Vec<u8>> {
    needles
        .iter()
        .map(|needle| needle.as_bytes().to_vec())
        .collect()
}

/// Whether `bytes` contain every one of `needles` (an empty needle is in any bytes).
fn contains_all(bytes: &[u8], needles: &[Vec<u8>]) -> bool {
    needles.iter().all(|wanted| {
        wanted.is_empty()
            || bytes
                .windows(wanted.len())
                .any(|window| window == wanted.as_slice())
    })
}
