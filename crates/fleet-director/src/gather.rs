//! Work started side by side and waited for together: every task ends (what was started
//! finishes), then the first failure is the outcome, else every result in the order the
//! work was started.

use tokio::task::JoinSet;

use super::error::StepError;

/// The results of `set`'s tasks, each started with its slot, in slot order; the first
/// failure, or a task that panicked, once all have ended.
///
/// # Errors
/// The first task's error to arrive, or [`StepError::Internal`].
pub async fn gather<T: Send + 'static>(
    mut set: JoinSet<(usize, Result<T, StepError>)>,
) -> Result<Vec<T>, StepError> {
    let mut results = Vec::new();
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((slot, Ok(result))) => results.push((slot, result)),
            Ok((_, Err(e))) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(StepError::Internal(e));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    results.sort_by_key(|(slot, _)| *slot);
    Ok(results.into_iter().map(|(_, result)| result).collect())
}
