//! etcd's own lock, `concurrency.Mutex` (client/v3/concurrency/mutex.go), its steps by hand
//! through the JSON gateway: the peer of dlock's hand-off between clients. A contender puts its
//! key under the lock's prefix on its session's lease; the key created first holds. A waiter
//! watches the newest key created before its own until it is deleted, looks again (none left
//! before it: its turn), and reads its own key (its session still has it) before it returns.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use serde_json::{json, Value};

use crate::etcd_gateway::{b64, Gateway};

/// One session's contender for one lock.
pub struct EtcdMutex {
    gateway: Gateway,
    port: u16,
    prefix: String,
    key: String,
    lease: i64,
}

impl EtcdMutex {
    /// A contender for the lock at `prefix`, on a session (a lease) of its own.
    pub fn new(port: u16, prefix: &str) -> EtcdMutex {
        let mut gateway = Gateway::new(port);
        let granted = parse(&gateway.post("/v3/lease/grant", "{\"TTL\":\"60\"}"));
        let lease = int(&granted["ID"]);
        EtcdMutex {
            gateway,
            port,
            prefix: format!("{prefix}/"),
            key: format!("{prefix}/{lease:x}"),
            lease,
        }
    }

    /// `Mutex.Lock`: its key put (if not there yet) with a read of the first key, one
    /// transaction; then, unless its key is that one, `waitDeletes` and a read of its key.
    pub fn lock(&mut self) {
        let (key, prefix) = (b64(&self.key), b64(&self.prefix));
        let end = b64(&prefix_end(&self.prefix));
        let first = json!({"request_range": {"key": prefix, "range_end": end, "limit": "1",
            "sort_order": "ASCEND", "sort_target": "CREATE"}});
        let txn = json!({
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": "", "lease": self.lease.to_string()}}, first],
            "failure": [{"request_range": {"key": key}}, first],
        });
        let answer = parse(&self.gateway.post("/v3/kv/txn", &txn.to_string()));
        let mine = if answer["succeeded"].as_bool() == Some(true) {
            int(&answer["header"]["revision"])
        } else {
            int(&answer["responses"][0]["response_range"]["kvs"][0]["create_revision"])
        };
        let owner = int(&answer["responses"][1]["response_range"]["kvs"][0]["create_revision"]);
        if owner == mine {
            return;
        }
        self.wait_deletes(mine - 1);
        self.gateway
            .post("/v3/kv/range", &json!({"key": key}).to_string());
    }

    /// `Mutex.Unlock`: its key deleted.
    pub fn unlock(&mut self) {
        let body = json!({"key": b64(&self.key)}).to_string();
        self.gateway.post("/v3/kv/deleterange", &body);
    }

    /// `waitDeletes`: until no key under the prefix was created at or before `before`, the
    /// newest such key watched until it is deleted.
    fn wait_deletes(&mut self, before: i64) {
        let range = json!({"key": b64(&self.prefix), "range_end": b64(&prefix_end(&self.prefix)),
            "limit": "1", "sort_order": "DESCEND", "sort_target": "CREATE",
            "max_create_revision": before.to_string()})
        .to_string();
        for _ in 0..10_000 {
            let answer = parse(&self.gateway.post("/v3/kv/range", &range));
            let Some(last) = answer["kvs"][0]["key"].as_str() else {
                return;
            };
            let from = int(&answer["header"]["revision"]) + 1;
            self.watch_delete(last, from);
        }
        panic!("the keys before this contender never went");
    }

    /// Waits for the deletion of `key` (base64) on a watch from revision `from`.
    fn watch_delete(&self, key: &str, from: i64) {
        let mut watch = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        watch.set_nodelay(true).expect("nodelay");
        let body =
            json!({"create_request": {"key": key, "start_revision": from.to_string()}}).to_string();
        let request = format!(
            "POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        watch.write_all(request.as_bytes()).expect("watch");
        let lines = BufReader::new(watch.try_clone().expect("clone")).lines();
        for line in lines.map_while(Result::ok) {
            if line.contains("\"type\":\"DELETE\"") {
                break;
            }
        }
        let _ = watch.shutdown(std::net::Shutdown::Both);
    }
}

fn parse(answer: &str) -> Value {
    serde_json::from_str(answer).expect("etcd's JSON")
}

/// One of etcd's int64s, which its JSON gateway writes as strings.
fn int(value: &Value) -> i64 {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .or_else(|| value.as_i64())
        .unwrap_or_else(|| panic!("an int64 in etcd's answer, not {value}"))
}

/// The end of the range of keys that start with `prefix` (its last byte plus one).
fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    if let Some(last) = bytes.last_mut() {
        *last += 1;
    }
    String::from_utf8(bytes).expect("an ASCII prefix")
}
