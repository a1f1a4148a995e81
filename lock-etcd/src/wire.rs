//! The gateway's JSON: keys and values in base64, 64-bit numbers as strings, and builders of
//! the transaction parts every step is made of.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_core::LockError;
use serde_json::Value;

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
}

/// A part of a request (a comparison, an operation, a whole transaction) as the JSON text the
/// gateway reads. A step's request is written once, as text: built as a tree of values and
/// then serialized, it took a sixth of the client's CPU on the uncontended pair. Fields at
/// their protobuf default (a comparison's `EQUAL`, its `VERSION` target, an empty list, no
/// lease) are left out, as the gateway reads them so: every byte of a request is parsed by
/// etcd's gateway, the busiest process on a contended name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Json(String);

impl Json {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        Json(value.to_string())
    }
}

/// Writes one JSON object, field by field.
struct Object(String);

impl Object {
    fn new() -> Object {
        let mut text = String::with_capacity(160);
        text.push('{');
        Object(text)
    }

    fn name(&mut self, name: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        quote(&mut self.0, name);
        self.0.push(':');
    }

    fn text(mut self, name: &str, value: &str) -> Object {
        self.name(name);
        quote(&mut self.0, value);
        self
    }

    /// Bytes, in base64.
    fn bytes(mut self, name: &str, value: &[u8]) -> Object {
        self.name(name);
        self.0.push('"');
        STANDARD.encode_string(value, &mut self.0);
        self.0.push('"');
        self
    }

    /// A 64-bit number, as the gateway reads one: a string.
    fn int(self, name: &str, value: i64) -> Object {
        self.text(name, &value.to_string())
    }

    fn flag(mut self, name: &str, value: bool) -> Object {
        self.name(name);
        self.0.push_str(if value { "true" } else { "false" });
        self
    }

    fn json(mut self, name: &str, value: &Json) -> Object {
        self.name(name);
        self.0.push_str(&value.0);
        self
    }

    /// `items`, left out when there are none (an empty list, as the gateway reads it).
    fn list(mut self, name: &str, items: &[Json]) -> Object {
        if items.is_empty() {
            return self;
        }
        self.name(name);
        self.0.push('[');
        for (at, item) in items.iter().enumerate() {
            if at > 0 {
                self.0.push(',');
            }
            self.0.push_str(&item.0);
        }
        self.0.push(']');
        self
    }

    /// `key`, and `range_end` if the span has one.
    fn span(self, span: &Span) -> Object {
        let object = self.bytes("key", &span.key);
        match &span.end {
            Some(end) => object.bytes("range_end", end),
            None => object,
        }
    }

    fn end(mut self) -> Json {
        self.0.push('}');
        Json(self.0)
    }
}

/// Writes `text` as a JSON string.
fn quote(into: &mut String, text: &str) {
    if text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        into.push_str(&Value::from(text).to_string());
    } else {
        // Field names, base64, digits: nothing to escape.
        into.push('"');
        into.push_str(text);
        into.push('"');
    }
}

/// `{ name: inner }`.
fn wrapped(name: &str, inner: Json) -> Json {
    Object::new().json(name, &inner).end()
}

/// `create_revision(span) == revision` (for a range: of every key in it; no key compares as
/// revision 0).
pub(crate) fn created_at(span: &Span, revision: i64) -> Json {
    if revision == 0 {
        return empty(span);
    }
    compare(span, "CREATE", "EQUAL", revision)
}

/// `create_revision(span) > revision` (for a range: of every key in it; a range with no key
/// compares as revision 0).
pub(crate) fn created_after(span: &Span, revision: i64) -> Json {
    compare(span, "CREATE", "GREATER", revision)
}

/// The key exists: its version is not 0 (a key's version is 0 exactly when its create
/// revision is: while it is not there).
pub(crate) fn exists(span: &Span) -> Json {
    compare(span, "VERSION", "NOT_EQUAL", 0)
}

/// No key in `span`: every key's version is 0, and a range with no key compares as version 0
/// (as create revision 0: the same test, in the fewest bytes).
pub(crate) fn empty(span: &Span) -> Json {
    compare(span, "VERSION", "EQUAL", 0)
}

/// `target(span) result revision`, where `target` is `VERSION`, `CREATE` or `MOD`.
fn compare(span: &Span, target: &str, result: &str, revision: i64) -> Json {
    let field = match target {
        "VERSION" => "version",
        "CREATE" => "create_revision",
        _ => "mod_revision",
    };
    let object = Object::new().span(span);
    let object = if target == "VERSION" {
        object
    } else {
        object.text("target", target)
    };
    let object = if result == "EQUAL" {
        object
    } else {
        object.text("result", result)
    };
    object.int(field, revision).end()
}

/// `mod_revision(span) < revision` (for a range: of every key in it).
pub(crate) fn modified_before(span: &Span, revision: i64) -> Json {
    compare(span, "MOD", "LESS", revision)
}

/// `value(key) == value` (a key that is not there never compares equal).
pub(crate) fn value_is(key: &[u8], value: &[u8]) -> Json {
    Object::new()
        .bytes("key", key)
        .text("target", "VALUE")
        .bytes("value", value)
        .end()
}

/// `mod_revision(key) == revision`.
pub(crate) fn modified_at(key: &[u8], revision: i64) -> Json {
    compare(&Span::key(key), "MOD", "EQUAL", revision)
}

/// The most operations this backend puts in one list of a transaction (etcd's default limit
/// is 128, `--max-txn-ops`).
pub(crate) const OPS_PER_TXN: usize = 64;

/// Puts `value` at `key`, bound to `lease` (0: none).
pub(crate) fn put(key: &[u8], value: &[u8], lease: i64) -> Json {
    let put = Object::new().bytes("key", key).bytes("value", value);
    let put = if lease == 0 {
        put
    } else {
        put.int("lease", lease)
    };
    wrapped("request_put", put.end())
}

/// Binds `key` to `lease` keeping its value (its create revision stays).
pub(crate) fn rebind(key: &[u8], lease: i64) -> Json {
    let put = Object::new()
        .bytes("key", key)
        .int("lease", lease)
        .flag("ignore_value", true)
        .end();
    wrapped("request_put", put)
}

/// Deletes the keys of `span`.
pub(crate) fn delete(span: &Span) -> Json {
    wrapped("request_delete_range", Object::new().span(span).end())
}

/// The first `limit` keys of `span` by create revision (0: all).
pub(crate) fn first_created(span: &Span, limit: i64) -> Json {
    let range = Object::new()
        .span(span)
        .text("sort_target", "CREATE")
        .text("sort_order", "ASCEND")
        .int("limit", limit)
        .end();
    wrapped("request_range", range)
}

/// The keys of `span`.
pub(crate) fn range(span: &Span) -> Json {
    wrapped("request_range", Object::new().span(span).end())
}

/// A transaction as an operation of another (etcd 3.3+).
pub(crate) fn nested(compare: Vec<Json>, success: Vec<Json>, failure: Vec<Json>) -> Json {
    wrapped("request_txn", txn(compare, success, failure))
}

pub(crate) fn txn(compare: Vec<Json>, success: Vec<Json>, failure: Vec<Json>) -> Json {
    Object::new()
        .list("compare", &compare)
        .list("success", &success)
        .list("failure", &failure)
        .end()
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
    fn a_request_reads_back_as_the_json_it_stands_for() {
        let request = txn(
            vec![
                empty(&Span::prefix(b"a/")),
                created_after(&Span::key(b"k"), 6),
                modified_at(b"k", 7),
                modified_before(&Span::key(b"k"), 8),
                value_is(b"k", b"v"),
                exists(&Span::key(b"k")),
                created_at(&Span::key(b"k"), 9),
            ],
            vec![
                put(b"k", b"v", 3),
                put(b"k", b"v", 0),
                rebind(b"k", 4),
                delete(&Span::key(b"k")),
            ],
            vec![
                first_created(&Span::prefix(b"a/"), 1),
                range(&Span::key(b"k")),
                nested(Vec::new(), vec![range(&Span::key(b"k"))], Vec::new()),
            ],
        );
        let read: Value = serde_json::from_slice(request.as_bytes()).expect("JSON");
        let (a, a_end, k, v) = (b64(b"a/"), b64(b"a0"), b64(b"k"), b64(b"v"));
        let expected = serde_json::json!({
            "compare": [
                {"key": a, "range_end": a_end, "version": "0"},
                {"key": k, "target": "CREATE", "result": "GREATER", "create_revision": "6"},
                {"key": k, "target": "MOD", "mod_revision": "7"},
                {"key": k, "target": "MOD", "result": "LESS", "mod_revision": "8"},
                {"key": k, "target": "VALUE", "value": v},
                {"key": k, "result": "NOT_EQUAL", "version": "0"},
                {"key": k, "target": "CREATE", "create_revision": "9"},
            ],
            "success": [
                {"request_put": {"key": k, "value": v, "lease": "3"}},
                {"request_put": {"key": k, "value": v}},
                {"request_put": {"key": k, "lease": "4", "ignore_value": true}},
                {"request_delete_range": {"key": k}},
            ],
            "failure": [
                {"request_range": {"key": a, "range_end": a_end, "sort_target": "CREATE",
                                   "sort_order": "ASCEND", "limit": "1"}},
                {"request_range": {"key": k}},
                {"request_txn": {"success": [{"request_range": {"key": k}}]}},
            ],
        });
        assert_eq!(read, expected);
    }

    #[test]
    fn text_is_quoted_as_a_json_string() {
        let text = "a \"quote\", a \\ and a\nnew line\u{1}, é";
        let written = Object::new().text("t", text).end();
        let read: Value = serde_json::from_slice(written.as_bytes()).expect("JSON");
        assert_eq!(read["t"], text);
    }

    #[test]
    fn a_prefix_ends_after_its_last_key() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
