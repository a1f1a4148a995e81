//! The gateway's JSON: keys and values in base64, 64-bit numbers as strings, and builders of
//! the transaction parts every step is made of.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_core::LockError;
use serde_json::{json, Value};

pub(crate) fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

pub(crate) fn unb64(text: &str) -> Vec<u8> {
    STANDARD.decode(text).unwrap_or_default()
}

/// The end of the range of keys starting with `prefix` (etcd's `WithPrefix`).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A 64-bit number, as the gateway writes it (a string; absent when zero).
pub(crate) fn int(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or(0),
        Value::Number(number) => number.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// A key-value as a range or a watch event has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kv {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) create_revision: i64,
    pub(crate) mod_revision: i64,
    pub(crate) lease: i64,
}

impl Kv {
    pub(crate) fn parse(kv: &Value) -> Kv {
        Kv {
            key: unb64(kv["key"].as_str().unwrap_or_default()),
            value: unb64(kv["value"].as_str().unwrap_or_default()),
            create_revision: int(&kv["create_revision"]),
            mod_revision: int(&kv["mod_revision"]),
            lease: int(&kv["lease"]),
        }
    }

    pub(crate) fn value_text(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// A range of keys: one key, or `[key, end)`.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) key: Vec<u8>,
    pub(crate) end: Option<Vec<u8>>,
}

impl Span {
    pub(crate) fn key(key: &[u8]) -> Span {
        Span {
            key: key.to_vec(),
            end: None,
        }
    }

    pub(crate) fn between(key: &[u8], end: &[u8]) -> Span {
        Span {
            key: key.to_vec(),
            end: Some(end.to_vec()),
        }
    }

    pub(crate) fn prefix(prefix: &[u8]) -> Span {
        Span::between(prefix, &prefix_end(prefix))
    }

    /// Whether `key` is in the span.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            None => key == self.key.as_slice(),
            Some(end) if end.as_slice() == [0] => key >= self.key.as_slice(),
            Some(end) => key >= self.key.as_slice() && key < end.as_slice(),
        }
    }

    fn fields(&self, into: &mut serde_json::Map<String, Value>) {
        into.insert("key".into(), json!(b64(&self.key)));
        if let Some(end) = &self.end {
            into.insert("range_end".into(), json!(b64(end)));
        }
    }
}

/// `create_revision(span) == revision` (for a range: of every key in it; no key compares as
/// revision 0).
pub(crate) fn created_at(span: &Span, revision: i64) -> Value {
    compare(span, "EQUAL", revision)
}

/// `create_revision(span) != 0`: the key exists.
pub(crate) fn exists(span: &Span) -> Value {
    compare(span, "NOT_EQUAL", 0)
}

/// No key in `span`.
pub(crate) fn empty(span: &Span) -> Value {
    compare(span, "EQUAL", 0)
}

fn compare(span: &Span, result: &str, revision: i64) -> Value {
    let mut map = serde_json::Map::new();
    span.fields(&mut map);
    map.insert("target".into(), json!("CREATE"));
    map.insert("result".into(), json!(result));
    map.insert("create_revision".into(), json!(revision.to_string()));
    Value::Object(map)
}

/// `mod_revision(span) < revision` (for a range: of every key in it).
pub(crate) fn modified_before(span: &Span, revision: i64) -> Value {
    let mut map = serde_json::Map::new();
    span.fields(&mut map);
    map.insert("target".into(), json!("MOD"));
    map.insert("result".into(), json!("LESS"));
    map.insert("mod_revision".into(), json!(revision.to_string()));
    Value::Object(map)
}

/// `value(key) == value` (a key that is not there never compares equal).
pub(crate) fn value_is(key: &[u8], value: &[u8]) -> Value {
    json!({
        "key": b64(key),
        "target": "VALUE",
        "result": "EQUAL",
        "value": b64(value),
    })
}

/// `mod_revision(key) == revision`.
pub(crate) fn modified_at(key: &[u8], revision: i64) -> Value {
    json!({
        "key": b64(key),
        "target": "MOD",
        "result": "EQUAL",
        "mod_revision": revision.to_string(),
    })
}

/// The most operations this backend puts in one list of a transaction (etcd's default limit
/// is 128, `--max-txn-ops`).
pub(crate) const OPS_PER_TXN: usize = 64;

/// Puts `value` at `key`, bound to `lease` (0: none).
pub(crate) fn put(key: &[u8], value: &[u8], lease: i64) -> Value {
    json!({ "request_put": { "key": b64(key), "value": b64(value), "lease": lease.to_string() } })
}

/// Binds `key` to `lease` keeping its value (its create revision stays).
pub(crate) fn rebind(key: &[u8], lease: i64) -> Value {
    json!({ "request_put": { "key": b64(key), "lease": lease.to_string(), "ignore_value": true } })
}

/// Deletes the keys of `span`.
pub(crate) fn delete(span: &Span) -> Value {
    let mut map = serde_json::Map::new();
    span.fields(&mut map);
    json!({ "request_delete_range": Value::Object(map) })
}

/// The first `limit` keys of `span` by create revision (0: all).
pub(crate) fn first_created(span: &Span, limit: i64) -> Value {
    let mut map = serde_json::Map::new();
    span.fields(&mut map);
    map.insert("sort_target".into(), json!("CREATE"));
    map.insert("sort_order".into(), json!("ASCEND"));
    map.insert("limit".into(), json!(limit.to_string()));
    json!({ "request_range": Value::Object(map) })
}

/// The keys of `span`.
pub(crate) fn range(span: &Span) -> Value {
    let mut map = serde_json::Map::new();
    span.fields(&mut map);
    json!({ "request_range": Value::Object(map) })
}

/// A transaction as an operation of another (etcd 3.3+).
pub(crate) fn nested(compare: Vec<Value>, success: Vec<Value>, failure: Vec<Value>) -> Value {
    json!({ "request_txn": txn(compare, success, failure) })
}

pub(crate) fn txn(compare: Vec<Value>, success: Vec<Value>, failure: Vec<Value>) -> Value {
    json!({ "compare": compare, "success": success, "failure": failure })
}

/// What a transaction answered: whether its comparisons held, each operation's answer in
/// order (a nested transaction's as one), and the store's revision.
#[derive(Debug, Clone)]
pub(crate) struct TxnAnswer {
    pub(crate) succeeded: bool,
    pub(crate) responses: Vec<Value>,
    pub(crate) revision: i64,
}

impl TxnAnswer {
    pub(crate) fn parse(value: &Value) -> TxnAnswer {
        Self::from_value(value.clone())
    }

    /// The answer in `value`, taken apart without copying its operations' answers.
    pub(crate) fn from_value(mut value: Value) -> TxnAnswer {
        let responses = match value.get_mut("responses").map(Value::take) {
            Some(Value::Array(responses)) => responses,
            _ => Vec::new(),
        };
        TxnAnswer {
            succeeded: value["succeeded"].as_bool().unwrap_or(false),
            responses,
            revision: int(&value["header"]["revision"]),
        }
    }

    /// The answer of the nested transaction at `at`.
    pub(crate) fn nested(&self, at: usize) -> Result<TxnAnswer, LockError> {
        self.responses
            .get(at)
            .and_then(|r| r.get("response_txn"))
            .map(|inner| {
                let mut answer = TxnAnswer::parse(inner);
                answer.revision = self.revision;
                answer
            })
            .ok_or_else(|| missing("a nested transaction"))
    }

    /// The keys of the range answered at `at`.
    pub(crate) fn kvs(&self, at: usize) -> Result<Vec<Kv>, LockError> {
        let range = self
            .responses
            .get(at)
            .and_then(|r| r.get("response_range"))
            .ok_or_else(|| missing("a range"))?;
        Ok(range["kvs"]
            .as_array()
            .map(|kvs| kvs.iter().map(Kv::parse).collect())
            .unwrap_or_default())
    }
}

fn missing(what: &str) -> LockError {
    LockError::protocol(format!("etcd answered a transaction without {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_its_last_key() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
