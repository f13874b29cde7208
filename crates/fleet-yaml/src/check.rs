use std::fmt;

use super::node::{Key, Node, Position, Value};

/// One thing wrong with a document: which key, where, and what is wrong and allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub at: Position,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}: {}",
            self.at.line, self.at.column, self.path, self.message
        )
    }
}

/// Collects every problem of a document in one walk, so that a user fixes them all at
/// once instead of one per attempt.
#[derive(Debug, Default)]
pub struct Checker {
    problems: Vec<Problem>,
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Checker {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn report(&mut self, path: &str, at: Position, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_string(),
            at,
            message: message.into(),
        });
    }

    pub fn into_problems(mut self) -> Vec<Problem> {
        self.problems
            .sort_by_key(|p| (p.at.line, p.at.column, p.path.clone()));
        self.problems
    }

    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The known entries of a mapping, reporting unknown keys (with the nearest known one)
    /// and a node that is not a mapping. A null node reads as an empty mapping, and a key
    /// whose value is null is left out: it takes its default. An unknown key is left out
    /// too, so no caller checks (and echoes) its value as if it were a neighbour: a
    /// misspelt `pasword` must not print the password.
    pub fn map<'n>(&mut self, node: &'n Node, path: &str, known: &[&str]) -> Vec<&'n (Key, Node)> {
        match &node.value {
            Value::Map(entries) => {
                for (key, _) in entries {
                    if !known.contains(&key.name.as_str()) {
                        let message = match nearest(&key.name, known) {
                            Some(near) => format!("unknown key; did you mean `{near}`?"),
                            None => format!("unknown key; known keys are {}", list(known)),
                        };
                        self.report(&join(path, &key.name), key.at, message);
                    }
                }
                entries
                    .iter()
                    .filter(|(key, value)| {
                        value.value != Value::Null && known.contains(&key.name.as_str())
                    })
                    .collect()
            }
            Value::Null => Vec::new(),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be a mapping, found {}", other.kind()),
                );
                Vec::new()
            }
        }
    }

    /// The items of a sequence, reporting a node that is not one.
    pub fn list<'n>(&mut self, node: &'n Node, path: &str) -> &'n [Node] {
        match &node.value {
            Value::Seq(items) => items,
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be a list, found {}", other.kind()),
                );
                &[]
            }
        }
    }

    pub fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be a string, found {}", other.kind()),
                );
                None
            }
        }
    }

    pub fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.value {
            Value::Bool(b) => Some(*b),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be true or false, found {}", describe(other)),
                );
                None
            }
        }
    }

    pub fn integer(&mut self, node: &Node, path: &str) -> Option<i64> {
        match &node.value {
            Value::Int(i) => Some(*i),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be an integer, found {}", describe(other)),
                );
                None
            }
        }
    }

    pub fn number(&mut self, node: &Node, path: &str) -> Option<f64> {
        match &node.value {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be a number, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// A string that must be one of `allowed`.
    pub fn choice<'a>(&mut self, node: &Node, path: &str, allowed: &[&'a str]) -> Option<&'a str> {
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            other => {
                self.report(
                    path,
                    node.at,
                    format!(
                        "must be one of {}, found {}",
                        list(allowed),
                        describe(other)
                    ),
                );
                return None;
            }
        };
        match allowed.iter().find(|a| **a == text) {
            Some(a) => Some(a),
            None => {
                self.report(
                    path,
                    node.at,
                    format!("`{text}` is not allowed; use one of {}", list(allowed)),
                );
                None
            }
        }
    }
}

/// The value itself for scalars, so that a message shows what the user wrote.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Int(i) => format!("`{i}`"),
        Value::Float(f) => format!("`{f}`"),
        Value::Str(s) => format!("the string `{s}`"),
        other => other.kind().into(),
    }
}

fn list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The known name closest to a misspelt one, if any is close enough to be a likely typo.
pub fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, load};

    #[test]
    fn unknown_keys_are_reported_with_the_nearest_known_key() {
        let doc = load("max_in_paralel: 3\nwhatever: 1\n", Limits::default()).unwrap();
        let mut checker = Checker::new();
        checker.map(&doc, "strategy.update", &["max_in_parallel", "canaries"]);
        let problems = checker.into_problems();
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].path, "strategy.update.max_in_paralel");
        assert!(
            problems[0]
                .message
                .contains("did you mean `max_in_parallel`")
        );
        assert_eq!(problems[0].at.line, 1);
        assert!(problems[1].message.contains("known keys are"));
        assert_eq!(problems[1].at.line, 2);
    }

    #[test]
    fn wrong_types_name_what_was_found() {
        let doc = load("n: three\n", Limits::default()).unwrap();
        let mut checker = Checker::new();
        assert_eq!(checker.integer(doc.get("n").unwrap(), "n"), None);
        let p = &checker.into_problems()[0];
        assert_eq!(p.message, "must be an integer, found the string `three`");
    }
}
