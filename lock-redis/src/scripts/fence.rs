//! The fenced writes of [`crate::fence`]: each checks the writer's fencing token against the
//! newest one that wrote the resource (`fence/check`), then writes, in one script.

use std::sync::LazyLock;

use super::LuaScript;

/// `SET` behind the fence. KEYS[1] the key · KEYS[2] its fence key · ARGV[1] the value ·
/// ARGV[2] the token. Answers `{1}`, or `{0, newest}` for a stale token.
pub(crate) static FENCED_SET: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fenced set", "fence/set", "fence/check"));

/// `DEL` behind the fence: KEYS and the token as [`FENCED_SET`], no value. Answers `{1,
/// deleted}` or `{0, newest}`.
pub(crate) static FENCED_DELETE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fenced delete", "fence/delete", "fence/check"));

/// `HSET` of one field behind the fence. KEYS as [`FENCED_SET`] · ARGV[1] the field · ARGV[2]
/// the value · ARGV[3] the token. Answers `{1, new field}` or `{0, newest}`.
pub(crate) static FENCED_HSET: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fenced hash set", "fence/hset", "fence/check"));
