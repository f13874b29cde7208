//! The `director.deployments` name pattern: operators think of "all `redis-*`
//! deployments", not of regular expressions, so `*` is the only special character.

/// Whether `name` matches `pattern` as a whole, `*` standing for any text, empty
/// included.
pub fn matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was and how much of the name it has swallowed so far; on a
    // mismatch it swallows one more character and matching resumes after it.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((star_at, swallowed_to)) = star {
            p = star_at + 1;
            n = swallowed_to + 1;
            star = Some((star_at, n));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_alone_matches_every_name_and_the_empty_one() {
        assert!(matches("*", "redis-1"));
        assert!(matches("*", ""));
    }

    #[test]
    fn a_pattern_without_star_matches_only_itself() {
        assert!(matches("pg", "pg"));
        assert!(!matches("pg", "pg-1"));
        assert!(!matches("pg", "p"));
        assert!(!matches("pg", ""));
    }

    #[test]
    fn a_prefix_pattern_anchors_at_the_start() {
        assert!(matches("redis-*", "redis-1"));
        assert!(matches("redis-*", "redis-"));
        assert!(!matches("redis-*", "xredis-1"));
    }

    #[test]
    fn a_suffix_pattern_anchors_at_the_end() {
        assert!(matches("*-prod", "pg-prod"));
        assert!(!matches("*-prod", "pg-prod-2"));
    }

    #[test]
    fn several_stars_backtrack() {
        assert!(matches("a*b*c", "abc"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(matches("*a*a*", "banana"));
        assert!(!matches("a*b*c", "acb"));
        assert!(matches("**", "x"));
    }

    #[test]
    fn names_are_compared_by_character_not_byte() {
        assert!(matches("dé*", "déploiement"));
        assert!(!matches("de*", "déploiement"));
    }
}
