//! A small blocking HTTP/1.1 client for etcd's JSON gateway: one kept-alive connection per
//! call in flight, every read and write bounded by a timeout, and a streamed response (a
//! watch) that another thread can end at once by shutting its socket down.
//!
//! The gateway needs little of HTTP: `POST` with a JSON body, answers with `Content-Length`
//! or chunked bodies. Owning the socket is what a watch needs and general clients do not
//! give: a waiter that leaves ends its stream from another thread, without a polling read.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::RecvFlags;

/// Where a connection goes: host, port and whether it speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) tls: bool,
}

impl Endpoint {
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// What a connection needs to start: timeouts and, for `https`, the TLS settings.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub(crate) connect_timeout: Duration,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

/// One HTTP/1.1 connection to one endpoint.
pub(crate) struct Connection {
    reader: BufReader<Stream>,
    /// The same socket, to set timeouts on and to shut down from another thread.
    socket: TcpStream,
    /// The socket's read and write timeouts as last set (`None`: not known).
    timeouts: Timeouts,
    pub(crate) endpoint: Endpoint,
}

/// A socket's timeouts as last set, so that a request sets them only when they change: each
/// setting is a system call, and a request would otherwise make a dozen (one per line read).
#[derive(Default)]
struct Timeouts {
    read: Option<Duration>,
    write: Option<Duration>,
}

/// How far under the time a read or write has left its timeout may be and not be set again: a
/// call ends by its deadline, and at most twice this before it.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

impl Timeouts {
    /// Sets one of the timeouts (`kept`, as last set) through `apply` to at most `wanted`,
    /// unless it is that already, under it by no more than twice the slack. Not known after
    /// `apply` failed.
    fn set(
        kept: &mut Option<Duration>,
        wanted: Duration,
        apply: impl FnOnce(Option<Duration>) -> io::Result<()>,
    ) -> io::Result<()> {
        let fits = |set: Duration| set <= wanted && wanted - set <= 2 * TIMEOUT_SLACK;
        if !kept.is_some_and(fits) {
            // A slack under what is wanted: the next calls, whose time left starts a little
            // under the last one's, still find it within bounds for their first millisecond.
            let timeout = match wanted > 2 * TIMEOUT_SLACK {
                true => wanted - TIMEOUT_SLACK,
                false => wanted,
            };
            *kept = None;
            apply(Some(timeout))?;
            *kept = Some(timeout);
        }
        Ok(())
    }
}

/// A handle that ends a connection's reads at once, from any thread.
#[derive(Clone)]
pub(crate) struct Closer(Arc<TcpStream>);

impl Closer {
    pub(crate) fn close(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// An answer: the status and the body.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Connection {
    /// Connects to `endpoint` within the dialer's connect timeout.
    pub(crate) fn open(endpoint: &Endpoint, dialer: &Dialer) -> io::Result<Connection> {
        Self::open_within(endpoint, dialer, dialer.connect_timeout)
    }

    /// Connects to `endpoint` within `within` (no longer than the dialer's connect timeout).
    pub(crate) fn open_within(
        endpoint: &Endpoint,
        dialer: &Dialer,
        within: Duration,
    ) -> io::Result<Connection> {
        let within = within.min(dialer.connect_timeout);
        if within.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
        let addresses = (endpoint.host.as_str(), endpoint.port).to_socket_addrs()?;
        for address in addresses {
            match TcpStream::connect_timeout(&address, within) {
                Ok(tcp) => {
                    tcp.set_nodelay(true)?;
                    let socket = tcp.try_clone()?;
                    let stream = Self::wrap(tcp, endpoint, dialer)?;
                    return Ok(Connection {
                        reader: BufReader::with_capacity(16 * 1024, stream),
                        socket,
                        // TLS set both for its handshake; either way they are set anew.
                        timeouts: Timeouts::default(),
                        endpoint: endpoint.clone(),
                    });
                }
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    fn wrap(tcp: TcpStream, endpoint: &Endpoint, dialer: &Dialer) -> io::Result<Stream> {
        if !endpoint.tls {
            return Ok(Stream::Plain(tcp));
        }
        #[cfg(feature = "tls")]
        {
            let config = dialer.tls.clone().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "no TLS configuration")
            })?;
            let name = rustls_pki_types::ServerName::try_from(endpoint.host.clone())
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
            let connection = rustls::ClientConnection::new(config, name)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
            tcp.set_read_timeout(Some(dialer.connect_timeout))?;
            tcp.set_write_timeout(Some(dialer.connect_timeout))?;
            let mut stream = rustls::StreamOwned::new(connection, tcp);
            // The handshake now, within the connect timeout, so a bad certificate is told at
            // connect rather than as a failed request.
            while stream.conn.is_handshaking() {
                stream.conn.complete_io(&mut stream.sock)?;
            }
            Ok(Stream::Tls(Box::new(stream)))
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (tcp, dialer);
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "https endpoints need the `tls` feature",
            ))
        }
    }

    /// Whether the server has closed this (idle) connection, or sent something unasked: such a
    /// connection is not used again. Looked at without waiting, before a request is written
    /// on a kept-alive connection, so that a request whose connection fails afterwards is one
    /// the server may have received.
    pub(crate) fn is_closed(&self) -> bool {
        if !self.reader.buffer().is_empty() {
            return true;
        }
        let mut byte = [0u8; 1];
        let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
        match rustix::net::recv(&self.socket, &mut byte, flags) {
            // End of stream, or bytes nobody asked for.
            Ok(_) => true,
            Err(errno) => errno != Errno::WOULDBLOCK && errno != Errno::AGAIN,
        }
    }

    /// A handle that ends this connection's reads from another thread.
    pub(crate) fn closer(&self) -> io::Result<Closer> {
        Ok(Closer(Arc::new(self.socket.try_clone()?)))
    }

    /// Sends `POST path` with a JSON `body` and reads the whole answer by `deadline` (each
    /// write and read gets the time left).
    pub(crate) fn post(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        deadline: Instant,
    ) -> io::Result<Response> {
        self.send(path, token, body, time_left(deadline)?)?;
        let (status, framing) = self.read_head(Some(deadline))?;
        let body = match framing {
            Framing::Length(length) => {
                let mut body = vec![0; length];
                self.arm(deadline)?;
                self.reader.read_exact(&mut body)?;
                body
            }
            Framing::Chunked => {
                let mut body = Vec::new();
                loop {
                    self.arm(deadline)?;
                    let Some(chunk) = self.read_chunk()? else {
                        break;
                    };
                    body.extend_from_slice(&chunk);
                }
                body
            }
        };
        Ok(Response { status, body })
    }

    /// Bounds the next reads by `deadline`.
    fn arm(&mut self, deadline: Instant) -> io::Result<()> {
        self.read_timeout(time_left(deadline)?)
    }

    /// Sets how long a read waits for bytes before it fails with a time-out (which loses
    /// nothing: [`read_some`](Self::read_some) may be called again), unless it is that already.
    pub(crate) fn read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let socket = &self.socket;
        Timeouts::set(&mut self.timeouts.read, timeout, |t| {
            socket.set_read_timeout(t)
        })
    }

    /// Sets the socket's write timeout to `timeout`, unless it is that already.
    fn write_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let socket = &self.socket;
        Timeouts::set(&mut self.timeouts.write, timeout, |t| {
            socket.set_write_timeout(t)
        })
    }

    /// Sends `POST path` and reads the head of a streamed answer, whose (chunked) body is
    /// then read with [`read_some`](Self::read_some).
    pub(crate) fn post_stream(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        timeout: Duration,
    ) -> io::Result<u16> {
        self.send(path, token, body, timeout)?;
        let (status, _) = self.read_head(None)?;
        Ok(status)
    }

    /// Appends the bytes that arrived (waiting for some, up to the read timeout) to `into`;
    /// 0 when the server closed the connection.
    pub(crate) fn read_some(&mut self, into: &mut Vec<u8>) -> io::Result<usize> {
        let available = self.reader.fill_buf()?;
        let read = available.len();
        into.extend_from_slice(available);
        self.reader.consume(read);
        Ok(read)
    }

    fn send(
        &mut self,
        path: &str,
        token: Option<&str>,
        body: &[u8],
        timeout: Duration,
    ) -> io::Result<()> {
        self.read_timeout(timeout)?;
        self.write_timeout(timeout)?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n",
            self.endpoint.authority(),
            body.len()
        );
        if let Some(token) = token {
            head.push_str("Authorization: ");
            head.push_str(token);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let stream = self.reader.get_mut();
        stream.write_all(&request)?;
        stream.flush()
    }

    /// The status line and the headers; each line read by `deadline`, if one is given.
    fn read_head(&mut self, deadline: Option<Instant>) -> io::Result<(u16, Framing)> {
        let mut line = String::new();
        if let Some(deadline) = deadline {
            self.arm(deadline)?;
        }
        if self.reader.read_line(&mut line)? == 0 {
            return Err(closed());
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| bad(format!("not an HTTP status line: {line:?}")))?;
        let mut framing = Framing::Length(0);
        loop {
            line.clear();
            if let Some(deadline) = deadline {
                self.arm(deadline)?;
            }
            if self.reader.read_line(&mut line)? == 0 {
                return Err(closed());
            }
            let header = line.trim_end();
            if header.is_empty() {
                return Ok((status, framing));
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let length = value
                    .parse()
                    .map_err(|_| bad(format!("bad Content-Length {value:?}")))?;
                framing = Framing::Length(length);
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.eq_ignore_ascii_case("chunked")
            {
                framing = Framing::Chunked;
            }
        }
    }

    /// One chunk of a chunked body; `None` after the last.
    fn read_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(closed());
        }
        let size = line.trim().split(';').next().unwrap_or("");
        let size =
            usize::from_str_radix(size, 16).map_err(|_| bad(format!("bad chunk size {line:?}")))?;
        let mut chunk = vec![0; size];
        self.reader.read_exact(&mut chunk)?;
        let mut end = [0; 2];
        self.reader.read_exact(&mut end)?;
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(chunk))
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

/// The time left before `deadline`; a time-out error when none is.
pub(crate) fn time_left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::from(io::ErrorKind::TimedOut))
    } else {
        Ok(left)
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the server closed the connection",
    )
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timeout `Timeouts::set` leaves after a call wanting `wanted` (`None`: not set).
    fn after(kept: &mut Option<Duration>, wanted: Duration) -> Option<Duration> {
        let mut applied = None;
        Timeouts::set(kept, wanted, |timeout| {
            applied = timeout;
            Ok(())
        })
        .expect("applied");
        applied
    }

    #[test]
    fn a_timeout_is_never_longer_than_the_time_left() {
        let ms = Duration::from_millis;
        let mut kept = None;
        assert_eq!(after(&mut kept, ms(5_000)), Some(ms(4_999)));
        // The next reads of the call, and the next calls: within the slack, not set again.
        assert_eq!(
            after(&mut kept, ms(4_999) + Duration::from_micros(500)),
            None
        );
        assert_eq!(after(&mut kept, ms(5_000)), None);
        // Less time left than the timeout set: set again, under it.
        assert_eq!(after(&mut kept, ms(4_998)), Some(ms(4_997)));
        // Much more time left than the timeout set: set again.
        assert_eq!(after(&mut kept, ms(5_000)), Some(ms(4_999)));
        // Too little time for the slack: exactly what is left.
        assert_eq!(
            after(&mut kept, Duration::from_micros(1_500)),
            Some(Duration::from_micros(1_500))
        );
        assert_eq!(kept, Some(Duration::from_micros(1_500)));
    }

    #[test]
    fn a_failed_setting_leaves_the_timeout_unknown() {
        let mut kept = Some(Duration::from_secs(1));
        let failed = Timeouts::set(&mut kept, Duration::from_secs(5), |_| {
            Err(io::Error::from(io::ErrorKind::InvalidInput))
        });
        assert!(failed.is_err());
        assert_eq!(kept, None);
    }
}
