//! BOSH versions in order. A director keeps every uploaded version and "the newest" is
//! what updates deploy and clean-up keeps; BOSH versions are dotted numbers with optional
//! suffixes (`621.125`, `1.10`, `3.1.0+dev.2`), which neither string order nor semver
//! parsing handles, hence a comparison of our own.

use std::cmp::Ordering;

/// Orders BOSH versions: parts split at `.`, `-` and `+` are compared in turn, numbers
/// by value and other parts as text, a number before text (as semver ranks them). When
/// one version is a prefix of the other, the longer one is newer (`1.2+dev.3` follows
/// `1.2`). Versions whose parts are all equal are ordered as text so that the order is
/// total (`1.01` before `1.1`).
pub fn compare(a: &str, b: &str) -> Ordering {
    let mut left = a.split(['.', '-', '+']);
    let mut right = b.split(['.', '-', '+']);
    loop {
        match (left.next(), right.next()) {
            (None, None) => return a.cmp(b),
            (Some(_), None) => return Ordering::Greater,
            (None, Some(_)) => return Ordering::Less,
            (Some(x), Some(y)) => {
                let order = compare_part(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_part(x: &str, y: &str) -> Ordering {
    match (is_number(x), is_number(y)) {
        (true, true) => {
            // By length first, so that numbers of any size compare without overflow.
            let x = x.trim_start_matches('0');
            let y = y.trim_start_matches('0');
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        }
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.cmp(y),
    }
}

fn is_number(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `candidate` should replace `current`: it is newer, or `current` is the
/// manifest shorthand `latest`, which the director resolves to the newest anyway.
pub fn replaces(candidate: &str, current: &str) -> bool {
    current == "latest" || compare(candidate, current) == Ordering::Greater
}

/// The version a new dev release takes after `existing`, as `bosh create-release` numbers
/// them: the newest one's next `+dev.N` (`0+dev.2` after `0+dev.1`, `3+dev.1` after the
/// final `3`), or `0+dev.1` for the first.
pub fn next_dev<'a>(existing: impl IntoIterator<Item = &'a str>) -> String {
    let Some(newest) = existing.into_iter().max_by(|a, b| compare(a, b)) else {
        return "0+dev.1".to_string();
    };
    match newest.rsplit_once("+dev.") {
        Some((base, n)) if is_number(n) => {
            let next = n.parse::<u64>().map_or(1, |n| n.saturating_add(1));
            format!("{base}+dev.{next}")
        }
        _ => format!("{newest}+dev.1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_versions_follow_the_newest() {
        assert_eq!(next_dev([]), "0+dev.1");
        assert_eq!(next_dev(["0+dev.1", "0+dev.9", "0+dev.10"]), "0+dev.11");
        assert_eq!(next_dev(["0+dev.4", "3"]), "3+dev.1");
        assert_eq!(next_dev(["3", "3+dev.2"]), "3+dev.3");
    }

    #[test]
    fn numeric_parts_compare_by_value() {
        assert_eq!(compare("1.10", "1.9"), Ordering::Greater);
        assert_eq!(compare("621.125", "621.99"), Ordering::Greater);
        assert_eq!(compare("2", "10"), Ordering::Less);
        assert_eq!(compare("1.2.3", "1.2.3"), Ordering::Equal);
    }

    #[test]
    fn numbers_longer_than_any_integer_type_still_compare() {
        assert_eq!(
            compare(
                "1.100000000000000000000000000",
                "1.99999999999999999999999999"
            ),
            Ordering::Greater
        );
    }

    #[test]
    fn a_longer_version_with_the_same_start_is_newer() {
        assert_eq!(compare("1.2+dev.3", "1.2"), Ordering::Greater);
        assert_eq!(compare("1.2", "1.2.1"), Ordering::Less);
    }

    #[test]
    fn text_parts_compare_as_text_and_after_numbers() {
        assert_eq!(compare("1.0-beta", "1.0-alpha"), Ordering::Greater);
        assert_eq!(compare("1.a", "1.5"), Ordering::Greater);
        assert_eq!(compare("3.1+dev.10", "3.1+dev.9"), Ordering::Greater);
    }

    #[test]
    fn leading_zeros_do_not_change_the_value_but_keep_the_order_total() {
        assert_eq!(compare("1.01", "1.2"), Ordering::Less);
        assert_eq!(compare("1.01", "1.1"), Ordering::Less);
        assert_eq!(compare("1.1", "1.01"), Ordering::Greater);
    }

    #[test]
    fn latest_is_always_replaced() {
        assert!(replaces("1.0", "latest"));
        assert!(!replaces("1.0", "1.0"));
        assert!(!replaces("1.0", "1.1"));
    }
}
