//! BOSH's drain protocol: a drain script prints an integer. Zero or more is a number of
//! seconds to wait before the job is stopped; a negative number `-N` asks to be run again
//! after N seconds with `job_check_status`, until it prints zero or more. Pure.

use std::time::Duration;

/// What one drain answer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainAnswer {
    /// Wait this long, then stop.
    Wait(Duration),
    /// Wait this long, then ask again.
    AskAgain(Duration),
}

/// What a drain script printed, when it was not one integer; quoted back, shortened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("printed `{printed}`, not an integer")]
pub struct DrainError {
    pub printed: String,
}

/// Reads a drain script's output.
///
/// # Errors
/// Output that is not one integer, quoted back.
pub fn answer(stdout: &str) -> Result<DrainAnswer, DrainError> {
    let text = stdout.trim();
    let n: i64 = text.parse().map_err(|_| DrainError {
        printed: shorten(text),
    })?;
    let seconds = Duration::from_secs(n.unsigned_abs());
    Ok(if n < 0 {
        DrainAnswer::AskAgain(seconds)
    } else {
        DrainAnswer::Wait(seconds)
    })
}

fn shorten(text: &str) -> String {
    if text.chars().count() > 60 {
        text.chars().take(57).collect::<String>() + "..."
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read() {
        assert_eq!(answer("0\n"), Ok(DrainAnswer::Wait(Duration::ZERO)));
        assert_eq!(answer(" 5 "), Ok(DrainAnswer::Wait(Duration::from_secs(5))));
        assert_eq!(
            answer("-3"),
            Ok(DrainAnswer::AskAgain(Duration::from_secs(3)))
        );
        assert_eq!(
            answer("soon").unwrap_err().to_string(),
            "printed `soon`, not an integer"
        );
        assert!(answer("").is_err());
    }
}
