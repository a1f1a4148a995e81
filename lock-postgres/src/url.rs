//! Connection URLs: parsed as libpq parses them, and shown without their password.

use std::time::Duration;

use dlock_core::LockError;
use tokio_postgres::config::Host;

/// `url` parsed (a `postgres://` or `postgresql://` URL, or a `key=value` string), with the
/// connect timeout set for each host, TCP keepalive on, and `application_name` set (sessions
/// show up as `dlock` in `pg_stat_activity`, the listening one as `dlock-listener`) unless the
/// URL sets one.
pub(crate) fn parse(
    url: &str,
    connect_timeout: Duration,
    application_name: &str,
) -> Result<tokio_postgres::Config, LockError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|error| LockError::Config {
        message: format!("invalid PostgreSQL URL {}: {error}", redact_url(url)),
        source: Some(Box::new(error)),
    })?;
    if config.get_hosts().is_empty() {
        return Err(LockError::config(format!(
            "the PostgreSQL URL {} names no host",
            redact_url(url)
        )));
    }
    // The client takes the userinfo to the first `@` of the whole URL: with another `@` (in a
    // password, or in a query value), the rest would be read as the host, connected to and
    // shown as one.
    let is_url = url.split_once("://").is_some();
    let plausible = |name: &str| {
        name.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%' | '[' | ']')
        })
    };
    let misread = config
        .get_hosts()
        .iter()
        .any(|host| matches!(host, Host::Tcp(name) if !plausible(name)));
    if (is_url && url.matches('@').count() > 1) || misread {
        return Err(LockError::config(format!(
            "the PostgreSQL URL {} cannot be read as meant: the client takes everything before \
             its first `@` as the user and password, so an `@` anywhere else (in a password, a \
             user name or a query value) must be written as %40",
            redact_url(url)
        )));
    }
    config.connect_timeout(connect_timeout);
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(10));
    config.keepalives_interval(Duration::from_secs(5));
    config.keepalives_retries(3);
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    Ok(config)
}

/// `host:port[,host:port]/db`, for messages.
pub(crate) fn describe(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    format!(
        "PostgreSQL {}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

/// The query (and `key=value`) parameters whose values are secrets: libpq's `password` and
/// `sslpassword`.
const SECRET_PARAMETERS: [&str; 2] = ["password", "sslpassword"];

/// `url` (a `postgres://` or `postgresql://` URL, or libpq's `key=value` form) with its
/// passwords replaced by `***`, for messages, `Debug` output and screens: the userinfo up to
/// the last `@` (a password may hold raw `/`, `@`, `:`, `?` or `#`), `?password=` and
/// `&sslpassword=` in the query, and `password = value` in the `key=value` form (spaces around
/// `=`, quoted values with `\'` and `\\` in them).
///
/// ```
/// use dlocks::postgres::redact_url;
///
/// assert_eq!(redact_url("postgres://app:s3/cr@t@db/app"), "postgres://app:***@db/app");
/// assert_eq!(redact_url("postgres://app@db/app?password=s3cret"), "postgres://app@db/app?password=***");
/// assert_eq!(redact_url("host=db password = 'it\\'s secret' user=app"), "host=db password = *** user=app");
/// ```
pub fn redact_url(url: &str) -> String {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    if matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
        return dlock_core::backend::redact_url(url, &SECRET_PARAMETERS);
    }
    redact_key_values(url)
}

/// libpq's `key = value ...` form with its secret values hidden. Text that does not parse is
/// hidden from the first secret key on.
fn redact_key_values(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        shown.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            return shown;
        }
        let key_len = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let (key, after_key) = rest.split_at(key_len);
        let after_space = after_key.trim_start();
        let Some(after_equals) = after_space.strip_prefix('=') else {
            return hide_from_secret(text, shown.len());
        };
        let value_start = after_equals.len() - after_equals.trim_start().len();
        let Some(value_len) = value_length(&after_equals[value_start..]) else {
            return hide_from_secret(text, shown.len());
        };
        let head = rest.len() - after_equals.len() + value_start;
        shown.push_str(&rest[..head]);
        let value = &rest[head..head + value_len];
        if SECRET_PARAMETERS
            .iter()
            .any(|secret| key.eq_ignore_ascii_case(secret))
        {
            shown.push_str("***");
        } else {
            shown.push_str(value);
        }
        rest = &rest[head + value_len..];
    }
}

/// The length of the value at the start of `text`: quoted (`'...'`, with `\` escapes) or up to
/// the next whitespace (with `\` escapes); `None` for an unterminated quote.
fn value_length(text: &str) -> Option<usize> {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return Some(at + 1),
            c if !quoted && c.is_whitespace() => return Some(at),
            _ => {}
        }
    }
    (!quoted).then_some(text.len())
}

/// `text` as far as `from` (what parsed), and from there: everything up to the first secret
/// key, then `***`.
fn hide_from_secret(text: &str, from: usize) -> String {
    let lower = text.to_ascii_lowercase();
    let secret = SECRET_PARAMETERS
        .iter()
        .filter_map(|secret| lower[from..].find(secret))
        .min();
    match secret {
        Some(at) => format!("{}***", &text[..from + at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn no_spelling_of_a_password_is_shown() {
        for (url, shown) in [
            (
                "postgres://app:secret@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            ("postgres://db/app", "postgres://db/app"),
            ("postgresql://app@db/app", "postgresql://app@db/app"),
            ("POSTGRES://app:secret@db/app", "POSTGRES://app:***@db/app"),
            ("postgres://app:se/cret@db/app", "postgres://app:***@db/app"),
            (
                "postgres://app:se%2Fcret@db/app",
                "postgres://app:***@db/app",
            ),
            ("postgres://app:se@cret@db/app", "postgres://app:***@db/app"),
            (
                "postgres://app:se:cr?et@db/app",
                "postgres://app:***@db/app",
            ),
            (
                "postgres://app:secret@h1:5432,h2:5432/app?target_session_attrs=read-write",
                "postgres://app:***@h1:5432,h2:5432/app?target_session_attrs=read-write",
            ),
            (
                "postgres://app:secret@[::1]:5432/app",
                "postgres://app:***@[::1]:5432/app",
            ),
            (
                "postgres://db/app?password=secret",
                "postgres://db/app?password=***",
            ),
            (
                "postgres://db/app?sslmode=require&password=se@cret&user=app",
                "postgres://db/app?sslmode=require&password=***&user=app",
            ),
            (
                "postgres://db/app?user=app&Password=se%26cret",
                "postgres://db/app?user=app&Password=***",
            ),
            (
                "postgres://db/app?sslpassword=secret",
                "postgres://db/app?sslpassword=***",
            ),
            (
                "host=db password=secret user=app",
                "host=db password=*** user=app",
            ),
            (
                "host=db password = secret user=app",
                "host=db password = *** user=app",
            ),
            (
                "host=db  password=  'se cret'  user=app",
                "host=db  password=  ***  user=app",
            ),
            (
                "host=db password='it\\'s se\\\\cret' user=app",
                "host=db password=*** user=app",
            ),
            (
                "host=db password=se\\ cret user=app",
                "host=db password=*** user=app",
            ),
            ("password=secret", "password=***"),
            ("host=db PASSWORD=secret", "host=db PASSWORD=***"),
            ("host=db password='secret", "host=db ***"),
            ("host=db user password=secret", "host=db user ***"),
            ("host=db", "host=db"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("secret"), "{url}");
        }
    }
}
