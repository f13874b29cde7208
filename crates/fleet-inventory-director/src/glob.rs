//! The `director.deployments` name pattern: operators think of "all `redis-*`
//! deployments", not of regular expressions, so `*` is the only special character.

/// A compiled `director.deployments` pattern, matched in time linear in the name.
#[derive(Debug, Clone)]
pub struct DeploymentPattern(globset::GlobMatcher);

impl DeploymentPattern {
    /// `pattern` with `*` standing for any text, empty included, and every other
    /// character for itself.
    pub fn new(pattern: &str) -> DeploymentPattern {
        // A run of stars means what one star means (and two would be globset's `**`);
        // each piece between them is literal.
        let mut collapsed = String::with_capacity(pattern.len());
        for c in pattern.chars() {
            if !(c == '*' && collapsed.ends_with('*')) {
                collapsed.push(c);
            }
        }
        let pieces: Vec<String> = collapsed.split('*').map(globset::escape).collect();
        let glob = globset::GlobBuilder::new(&pieces.join("*"))
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .expect("every character but `*` is escaped");
        DeploymentPattern(glob.compile_matcher())
    }

    /// Whether `name` matches the pattern as a whole.
    pub fn matches(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        DeploymentPattern::new(pattern).matches(name)
    }

    #[test]
    fn glob_syntax_other_than_the_star_is_taken_literally() {
        assert!(matches("pg-[1]?{a,b}", "pg-[1]?{a,b}"));
        assert!(!matches("pg-[1]", "pg-1"));
        assert!(matches("a\\*", "a\\b"));
        assert!(matches("*/*", "x/y"));
        assert!(matches("a***b", "aXb"));
    }

    #[test]
    fn a_long_name_against_many_stars_is_answered() {
        let name = "a".repeat(10_000);
        assert!(!matches(&format!("{}b", "a*".repeat(50)), &name));
    }

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
