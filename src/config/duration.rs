//! Durations as the configuration writes them: `30s`, `5m`, `2h`, `1h 30m`, `500ms`.

use std::time::Duration;

/// Longer than any sensible interval or timeout, and far from overflowing a deadline.
const LONGEST: Duration = Duration::from_secs(365 * 86_400);

/// Parses a duration, refusing zero and negative values with a message that says what is
/// allowed.
///
/// ```
/// use std::time::Duration;
/// use fleet_updater::config::parse_duration;
///
/// assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("0s").unwrap_err().contains("zero"));
/// ```
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(format!("`{text}` is negative; durations must be positive"));
    }
    let d = humantime::parse_duration(trimmed).map_err(|_| {
        format!("`{text}` is not a duration; write it like `30s`, `5m`, `2h` or `1h 30m`")
    })?;
    if d.is_zero() {
        return Err(format!("`{text}` is zero; durations must be positive"));
    }
    if d > LONGEST {
        return Err(format!("`{text}` is longer than the limit of 365 days"));
    }
    Ok(d)
}

/// The canonical text of a duration, as `check-config` prints it.
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_forms_parse() {
        assert_eq!(parse_positive("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_positive("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_positive("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_positive("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_positive("250ms"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn zero_negative_and_garbage_are_refused() {
        assert!(parse_positive("0s").unwrap_err().contains("zero"));
        assert!(parse_positive("-5m").unwrap_err().contains("negative"));
        assert!(
            parse_positive("soon")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(parse_positive("30").unwrap_err().contains("not a duration"));
        assert!(
            parse_positive("400days")
                .unwrap_err()
                .contains("longer than")
        );
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(format(Duration::from_secs(5400)), "1h 30m");
    }
}
