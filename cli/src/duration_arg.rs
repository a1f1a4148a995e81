//! Durations on the command line: `500ms`, `30s`, `1.5s`, `2m`, `1h`, or a bare number of
//! seconds (as `timeout` and `sleep` take them).

use std::time::Duration;

/// Parses `text` as a duration; the error says what was wrong and what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_seconds = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(expected(text)),
    };
    let value: f64 = number.parse().map_err(|_| expected(text))?;
    let seconds = value * unit_seconds;
    if !seconds.is_finite() || seconds > dlocks::MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "{text:?} is longer than the longest duration accepted ({} days)",
            dlocks::MAX_DURATION.as_secs() / 86_400
        ));
    }
    // Rounded to the millisecond: what the servers count in.
    Ok(Duration::from_millis((seconds * 1000.0).round() as u64))
}

/// Parses `--lease`: a duration the watchdog can renew (at least [`dlocks::MIN_WATCHDOG_LEASE`]).
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    if lease < dlocks::MIN_WATCHDOG_LEASE {
        return Err(format!(
            "a lease must be at least {}ms (it is renewed every third of it), got {text:?}",
            dlocks::MIN_WATCHDOG_LEASE.as_millis()
        ));
    }
    Ok(lease)
}

fn expected(text: &str) -> String {
    format!("{text:?} is not a duration; use a number with ms, s, m or h (500ms, 30s, 2m, 1h)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_seconds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_lease_too_short_to_renew_is_refused() {
        assert!(parse_lease("0")
            .expect_err("zero")
            .contains("at least 30ms"));
        assert!(parse_lease("10ms").is_err());
        assert_eq!(parse_lease("30ms"), Ok(Duration::from_millis(30)));
        assert!(parse_lease("ten")
            .expect_err("bad")
            .contains("not a duration"));
    }

    #[test]
    fn bad_input_says_what_is_accepted() {
        for bad in ["", "s", "ten", "5 minutes", "-1s", "1..2s", "3d", "1e3s"] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("not a duration"), "{bad}: {error}");
        }
        assert!(parse_duration("100000h")
            .expect_err("too long")
            .contains("longest"));
    }
}
