//! A client's record (its name, host, pid and holds), kept in one hash per client for
//! inspection; no lock step reads it.

use std::sync::LazyLock;

use super::LuaScript;

/// Replaces a client's record: one script, so a reader sees the old record or the new one.
///
/// KEYS[1] the record · ARGV[1] time to live ms · ARGV[2..] field, value pairs.
pub(crate) static CLIENT_RECORD_PUBLISH: LazyLock<LuaScript> =
    LazyLock::new(|| step!("client record publish", "client_record/publish"));
