//! What releases announce: the `NOTIFY` payload that tells which lock (or which fair waiter) a
//! message is for, and the channel a fair waiter's messages go to. The schema's `_key`,
//! `_waiter_key` and `_client_channel` compute the same on the server.

use std::time::Duration;

use sha2::{Digest, Sha256};

use dlock_core::LockError;

/// Names up to this many bytes travel as they are; longer ones as their SHA-256.
pub(crate) const PLAIN_KEY_LIMIT: usize = 200;

/// The key a release of lock `name` announces: `r<name>`, or `h<sha-256 of name in hex>` for a
/// long name.
pub(crate) fn lock_key(name: &str) -> String {
    if name.len() <= PLAIN_KEY_LIMIT {
        format!("r{name}")
    } else {
        format!("h{}", hex(&Sha256::digest(name.as_bytes())))
    }
}

/// The key of `owner`'s wait for fair lock `name`: `w<sha-256 of name, a zero byte, owner>`. A
/// grant to that wait is announced as `g<wait id>:<the same hex>`.
pub(crate) fn waiter_key(name: &str, owner: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    hash.update([0u8]);
    hash.update(owner.as_bytes());
    format!("w{}", hex(&hash.finalize()))
}

/// The channel on which a fair release tells waiter `owner` of its turn or its grant: its
/// client's (the id up to its last `:`), `dlock:` and 40 hex digits of SHA-256(schema, a zero
/// byte, client). Only the processes of that client listen to it, so a release wakes the
/// listener of one process, not of every process waiting on the schema.
pub(crate) fn client_channel(schema: &str, owner: &str) -> String {
    let client = owner.rsplit_once(':').map_or(owner, |(client, _)| client);
    let mut hash = Sha256::new();
    hash.update(schema.as_bytes());
    hash.update([0u8]);
    hash.update(client.as_bytes());
    let mut channel = format!("dlock:{}", hex(&hash.finalize()));
    channel.truncate("dlock:".len() + 40);
    channel
}

/// What a notification tells the subscriptions of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Told {
    /// To look now: a release, a turn, a grant without a proof (which wakes the wait it
    /// names).
    Now(String),
    /// To look now, at a grant of the offer of attempt `attempt` (`g<attempt>:<hex>`), with
    /// the proof it came with, if any (`g<attempt>:<hex>:<proof>`: see `grant_proofs`).
    Granted {
        key: String,
        attempt: u64,
        proof: Option<String>,
    },
    /// To look once this long has passed: `d<µs>:<hex>` tells the waiter behind a granted
    /// head when that grant runs out, should the granted waiter be dead.
    After(String, Duration),
}

/// What a payload tells, and the key of the subscriptions it is for.
pub(crate) fn parse_payload(payload: &str) -> Option<Told> {
    match payload.as_bytes().first()? {
        b'r' | b'h' | b'w' => Some(Told::Now(payload.to_owned())),
        b'g' => {
            let (id, rest) = payload[1..].split_once(':')?;
            let attempt = id.parse::<u64>().ok()?;
            let (hex, proof) = match rest.split_once(':') {
                Some((hex, proof)) => (hex, Some(proof.to_owned())),
                None => (rest, None),
            };
            Some(Told::Granted {
                key: format!("w{hex}"),
                attempt,
                proof,
            })
        }
        b'd' => {
            let (after, hex) = payload[1..].split_once(':')?;
            let after = Duration::from_micros(after.parse::<u64>().ok()?);
            Some(Told::After(format!("w{hex}"), after))
        }
        _ => None,
    }
}

/// Refuses a name PostgreSQL text cannot hold (a NUL byte): it would fail on the server.
pub(crate) fn check_name(name: &str) -> Result<(), LockError> {
    if name.contains('\0') {
        return Err(LockError::invalid(
            "name",
            "a lock name on PostgreSQL cannot contain a NUL character",
        ));
    }
    Ok(())
}

/// `bytes` in lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{client_channel, lock_key, parse_payload, waiter_key, Told};

    #[test]
    fn long_names_travel_as_their_hash_and_short_ones_as_they_are() {
        assert_eq!(lock_key("orders:42"), "rorders:42");
        let long = "x".repeat(201);
        let key = lock_key(&long);
        assert!(key.starts_with('h') && key.len() == 65, "{key}");
        assert_ne!(
            lock_key(&"x".repeat(202)),
            key,
            "no truncation into a collision"
        );
        // sha256('abc'), as PostgreSQL's sha256() gives it.
        let abc = waiter_key("ab", "c");
        assert_eq!(abc.len(), 65);
    }

    #[test]
    fn a_waiters_channel_is_its_clients_in_its_schema() {
        // SHA-256 of `dlock`, a zero byte and `client-1` (what `_client_channel` computes).
        let channel = "dlock:03e264ea1d38f564ffe6ba14b948653a6ea33ac0";
        assert_eq!(client_channel("dlock", "client-1:7"), channel);
        assert_eq!(client_channel("dlock", "client-1:owned-3"), channel);
        assert_eq!(
            client_channel("dlock", "client-1"),
            channel,
            "an id without `:`"
        );
        assert_eq!(
            client_channel("my_schema", "dlock-host-12-ab:cd:5"),
            "dlock:9503a67d32181ad8cea37219afbdccbd66065765",
            "the client is the id up to its last `:`"
        );
        assert_ne!(client_channel("other", "client-1:7"), channel);
        assert!(
            channel.len() < 64,
            "a PostgreSQL channel name is under 64 bytes"
        );
    }

    #[test]
    fn payloads_name_their_subscription() {
        assert_eq!(parse_payload("rname"), Some(Told::Now("rname".into())));
        assert_eq!(
            parse_payload("g42:abcd"),
            Some(Told::Granted {
                key: "wabcd".into(),
                attempt: 42,
                proof: None
            })
        );
        assert_eq!(
            parse_payload("g42:abcd:s3cret"),
            Some(Told::Granted {
                key: "wabcd".into(),
                attempt: 42,
                proof: Some("s3cret".into())
            })
        );
        assert_eq!(parse_payload("gx:abcd"), None);
        assert_eq!(
            parse_payload("d2000000:abcd"),
            Some(Told::After("wabcd".into(), Duration::from_secs(2)))
        );
        assert_eq!(parse_payload("d-1:abcd"), None);
        assert_eq!(parse_payload("dabcd"), None);
        assert_eq!(parse_payload(""), None);
    }
}
