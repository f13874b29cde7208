//! Which names the director accepts for deployments, instance groups and jobs: BOSH's
//! `VALID_ID` (letters, digits, `-`, `_`, `.`, `+`), not only dots, and not longer than
//! [`MAX_NAME_LEN`]. A name reaches file paths, DNS labels, task lists and terminals;
//! control characters, `/` and shell metacharacters are refused where it is first read.

/// Longer names would overflow DNS labels and table columns long before they helped anyone.
pub const MAX_NAME_LEN: usize = 128;

/// Why `name` is refused, or `None` when it is accepted. The reason never repeats the
/// name: it may hold escape sequences.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "is {} bytes long; names are at most {MAX_NAME_LEN}",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+')))
    {
        return Some(format!(
            "may hold only letters, digits, `-`, `_`, `.` and `+`; found {}",
            bad.escape_default()
        ));
    }
    if name.chars().all(|c| c == '.') {
        return Some("must not be only dots".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bosh_names_pass_and_hostile_ones_are_refused_without_being_echoed() {
        for good in [
            "postgres",
            "service-instance_3f2a",
            "rabbitmq.v2",
            "c++",
            "A-1",
        ] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "",
            "..",
            ".",
            "../etc",
            "a/b",
            "db\u{1b}]0;owned\u{7}",
            "x\u{1b}[31mred",
            "line\nbreak",
            "$(reboot)",
            "a;b",
            "a b",
            "naïve",
            long.as_str(),
        ] {
            let problem = name_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(!problem.contains('\u{1b}'), "{problem}");
            if bad.len() > 2 {
                assert!(!problem.contains(bad), "{problem}");
            }
        }
        assert_eq!(name_problem(&"a".repeat(MAX_NAME_LEN)), None);
    }
}
