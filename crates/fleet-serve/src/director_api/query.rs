//! Query parameters as the director reads them: booleans only when the literal `true`,
//! counts as an integer or a percentage.

use std::collections::HashMap;

use super::error::{ApiError, code};
use fleet_director::manifest::Count;

pub type Params = HashMap<String, String>;

pub fn flag(params: &Params, name: &str) -> bool {
    params.get(name).is_some_and(|v| v == "true")
}

/// A boolean that must be spelled `true` or `false` when given, for parameters whose
/// misspelling would change what a destructive request does.
///
/// # Errors
/// Any other value, named with the parameter.
pub fn strict_flag(params: &Params, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("{name} must be true or false, got '{other}'"),
        )),
    }
}

/// # Errors
/// A value that is not a whole number, named with the parameter.
pub fn number(params: &Params, name: &str) -> Result<Option<u64>, ApiError> {
    params
        .get(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(
                    code::VALIDATION_INVALID_TYPE,
                    format!("{name} must be a number, got '{v}'"),
                )
            })
        })
        .transpose()
}

/// `skip_drain` is `*` or a list of groups in the director; any value skips draining here.
pub fn present(params: &Params, name: &str) -> bool {
    params
        .get(name)
        .is_some_and(|v| !v.is_empty() && v != "false")
}

/// # Errors
/// A value that is neither `N` nor `N%`, named with the parameter.
pub fn count(params: &Params, name: &str) -> Result<Option<Count>, ApiError> {
    let Some(text) = params.get(name) else {
        return Ok(None);
    };
    let parsed = match text.strip_suffix('%') {
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .map(Count::Percent),
        None => text.parse::<u32>().ok().map(Count::Fixed),
    };
    parsed.map(Some).ok_or_else(|| {
        ApiError::bad_request(
            code::VALIDATION_INVALID_TYPE,
            format!("{name} value should be integer or percent, got '{text}'"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn counts_are_integers_or_percentages_and_anything_else_names_the_parameter() {
        let p = params(&[("canaries", "2"), ("max_in_flight", "25%"), ("bad", "two")]);
        assert_eq!(count(&p, "canaries").unwrap(), Some(Count::Fixed(2)));
        assert_eq!(
            count(&p, "max_in_flight").unwrap(),
            Some(Count::Percent(25))
        );
        assert_eq!(count(&p, "missing").unwrap(), None);
        let e = count(&p, "bad").unwrap_err();
        assert!(
            e.description
                .contains("bad value should be integer or percent")
        );
    }

    #[test]
    fn numbers_and_strict_flags_name_the_parameter_they_refuse() {
        let p = params(&[
            ("limit", "10"),
            ("bad", "ten"),
            ("all", "true"),
            ("x", "yes"),
        ]);
        assert_eq!(number(&p, "limit").unwrap(), Some(10));
        assert_eq!(number(&p, "missing").unwrap(), None);
        assert!(
            number(&p, "bad")
                .unwrap_err()
                .description
                .contains("bad must be a number")
        );
        assert!(strict_flag(&p, "all").unwrap());
        assert!(!strict_flag(&p, "missing").unwrap());
        assert!(
            strict_flag(&p, "x")
                .unwrap_err()
                .description
                .contains("x must be true or false")
        );
    }

    #[test]
    fn booleans_are_true_only_when_spelled_true() {
        let p = params(&[("fix", "true"), ("recreate", "1"), ("skip_drain", "*")]);
        assert!(flag(&p, "fix"));
        assert!(!flag(&p, "recreate"));
        assert!(present(&p, "skip_drain"));
        assert!(!present(&p, "dry_run"));
    }
}
