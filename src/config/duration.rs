//! Durations as the configuration writes them: `30s`, `5m`, `2h`, `1h 30m`, `500ms`.

use std::time::Duration;

/// Longer than any sensible interval or timeout, and far from overflowing a deadline.
const LONGEST: Duration = Duration::from_secs(365 * 86_400);

/// A duration the configuration refuses; each says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is negative; durations must be positive")]
    Negative(String),
    #[error("`{0}` is not a duration; write it like `30s`, `5m`, `2h` or `1h 30m`")]
    NotADuration(String),
    #[error("`{0}` is zero; durations must be positive")]
    Zero(String),
    #[error("`{0}` is longer than the limit of 365 days")]
    TooLong(String),
}

/// Parses a duration, refusing zero and negative values with a message that says what is
/// allowed.
///
/// ```
/// use std::time::Duration;
/// use fleet_updater::config::parse_duration;
///
/// assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("0s").unwrap_err().to_string().contains("zero"));
/// ```
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(DurationError::Negative(text.to_string()));
    }
    let d = humantime::parse_duration(trimmed)
        .map_err(|_| DurationError::NotADuration(text.to_string()))?;
    if d.is_zero() {
        return Err(DurationError::Zero(text.to_string()));
    }
    if d > LONGEST {
        return Err(DurationError::TooLong(text.to_string()));
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
        assert!(
            parse_positive("0s")
                .unwrap_err()
                .to_string()
                .contains("zero")
        );
        assert!(
            parse_positive("-5m")
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
        assert!(
            parse_positive("soon")
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
        assert!(
            parse_positive("30")
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
        assert!(
            parse_positive("400days")
                .unwrap_err()
                .to_string()
                .contains("longer than")
        );
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(format(Duration::from_secs(5400)), "1h 30m");
    }
}
