//! etcd's JSON gateway by hand, for the benchmark's own requests (not through dlock): a
//! kept-alive HTTP/1.1 connection, keys and values in base64.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// A kept-alive HTTP/1.1 connection to the gateway, written by hand.
pub struct Gateway {
    reader: BufReader<TcpStream>,
    port: u16,
}

impl Gateway {
    pub fn new(port: u16) -> Gateway {
        let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        Gateway {
            reader: BufReader::new(tcp),
            port,
        }
    }

    /// A connection to the member `http://127.0.0.1:<port>` names.
    pub fn to_url(url: &str) -> Gateway {
        Gateway::new(port_of(url))
    }

    pub fn post(&mut self, path: &str, body: &str) -> String {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .expect("write");
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("read");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().expect("length");
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
        String::from_utf8(body).expect("utf-8")
    }

    /// Puts `value` at `key`.
    pub fn put(&mut self, key: &str, value: &str) {
        let body = format!("{{\"key\":\"{}\",\"value\":\"{}\"}}", b64(key), b64(value));
        self.post("/v3/kv/put", &body);
    }
}

/// The port of `http://host:<port>`.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.trim_end_matches('/').parse().ok())
        .expect("an etcd URL with a port")
}

pub fn b64(text: &str) -> String {
    STANDARD.encode(text)
}

/// The text a base64 value of the gateway's holds.
pub fn unb64(value: &str) -> Option<String> {
    String::from_utf8(STANDARD.decode(value).ok()?).ok()
}
