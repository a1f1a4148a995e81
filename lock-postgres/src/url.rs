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
        message: format!("invalid PostgreSQL URL {}: {error}", redact(url)),
        source: Some(Box::new(error)),
    })?;
    if config.get_hosts().is_empty() {
        return Err(LockError::config(format!(
            "the PostgreSQL URL {} names no host",
            redact(url)
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

/// `url` with its password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((credentials, host)) = rest.split_once('@') {
            if let Some((user, _)) = credentials.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
        return url.to_owned();
    }
    // key=value form: hide password=...
    url.split_whitespace()
        .map(|part| {
            if part.starts_with("password=") {
                "password=***"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://app:secret@db:5432/app"),
            "postgres://app:***@db:5432/app"
        );
        assert_eq!(redact("postgres://db/app"), "postgres://db/app");
        assert_eq!(
            redact("host=db password=secret user=app"),
            "host=db password=*** user=app"
        );
    }
}
