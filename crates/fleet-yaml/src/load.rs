use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::node::{Key, Node, Position, Value};

/// Bounds on what a document may cost to load. The defaults suit configuration files and
/// manifests; an alias bomb or a deeply nested document is refused long before it can
/// exhaust memory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_depth: usize,
    /// Nodes in the loaded tree, counting every copy an alias makes.
    pub max_nodes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 64,
            max_nodes: 1_000_000,
        }
    }
}

impl Limits {
    /// What a document a director reads from a client may cost: a manifest, a cloud
    /// config, a release's `release.MF` and job specs. Tenfold fewer nodes than a
    /// configuration file may have: such documents are small, and anyone who may upload
    /// sends them.
    pub fn document(max_bytes: usize) -> Limits {
        Limits {
            max_bytes,
            max_depth: 64,
            max_nodes: 100_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct LoadError {
    pub at: Position,
    pub message: String,
}

/// Loads a single YAML document; an empty input is a null node.
///
/// ```
/// use fleet_yaml::{Limits, Value, load};
///
/// let root = load("strategy:\n  canaries: 2\n", Limits::default()).unwrap();
/// let canaries = root.get("strategy").and_then(|s| s.get("canaries")).unwrap();
/// assert_eq!(canaries.value, Value::Int(2));
/// assert_eq!((canaries.at.line, canaries.at.column), (2, 13));
/// ```
///
/// # Errors
/// Syntax errors, duplicate keys, non-scalar keys, unknown aliases, more than one
/// document, and any exceeded [`Limits`], each with the position where it was found.
pub fn load(text: &str, limits: Limits) -> Result<Node, LoadError> {
    load_with(text, limits, Schema::Core)
}

/// How plain scalars are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    /// YAML 1.2: only `true`/`false` are booleans.
    Core,
    /// YAML 1.1 as the BOSH director reads manifests and configs: `yes`, `no`, `on`,
    /// `off`, `y` and `n` are booleans too, and integers may hold `_` separators.
    Director,
}

/// [`load`] with plain scalars read as the BOSH director reads them (YAML 1.1), for
/// comparing documents as the director would: `enabled: yes` and `enabled: true` mean the
/// same to it.
///
/// # Errors
/// As [`load`].
pub fn load_as_director(text: &str, limits: Limits) -> Result<Node, LoadError> {
    load_with(text, limits, Schema::Director)
}

fn load_with(text: &str, limits: Limits, schema: Schema) -> Result<Node, LoadError> {
    if text.len() > limits.max_bytes {
        return Err(LoadError {
            at: Position { line: 1, column: 1 },
            message: format!(
                "document is {} bytes, more than the limit of {} bytes",
                text.len(),
                limits.max_bytes
            ),
        });
    }
    Builder::new(limits, schema).run(Parser::new_from_str(text))
}

enum Frame {
    Seq {
        items: Vec<Node>,
        at: Position,
        anchor: usize,
    },
    Map {
        entries: Vec<(Key, Node)>,
        /// Each key's first line, so that a duplicate is found in constant time: a flat
        /// mapping of many keys must load in linear time.
        lines: HashMap<String, usize>,
        key: Option<Key>,
        at: Position,
        anchor: usize,
    },
}

struct Builder {
    limits: Limits,
    schema: Schema,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize)>,
    nodes: usize,
    documents: usize,
    root: Option<Node>,
}

fn position(span: &Span) -> Position {
    Position {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

fn fail<T>(at: Position, message: impl Into<String>) -> Result<T, LoadError> {
    Err(LoadError {
        at,
        message: message.into(),
    })
}

impl Builder {
    fn new(limits: Limits, schema: Schema) -> Self {
        Builder {
            limits,
            schema,
            stack: Vec::new(),
            anchors: HashMap::new(),
            nodes: 0,
            documents: 0,
            root: None,
        }
    }

    fn run<'a, T: saphyr_parser::Input>(
        mut self,
        mut parser: Parser<'a, T>,
    ) -> Result<Node, LoadError> {
        while let Some(event) = parser.next_event() {
            let (event, span) = event.map_err(|e| LoadError {
                at: Position {
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                },
                message: e.info().to_string(),
            })?;
            let at = position(&span);
            match event {
                Event::DocumentStart(_) => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return fail(at, "expected one YAML document, found more");
                    }
                }
                Event::Scalar(text, style, anchor, tag) => {
                    let quoted = !matches!(style, ScalarStyle::Plain)
                        || tag.is_some_and(|t| t.handle == "!!" && t.suffix == "str");
                    if let Some(Frame::Map {
                        key: key @ None, ..
                    }) = self.stack.last_mut()
                    {
                        *key = Some(Key {
                            name: text.into_owned(),
                            at,
                        });
                        continue;
                    }
                    let value = if quoted {
                        Value::Str(text.into_owned())
                    } else if self.schema == Schema::Director {
                        resolve_plain_1_1(&text)
                    } else {
                        resolve_plain(&text)
                    };
                    self.count(1, at)?;
                    self.finish(Node { value, at }, anchor, 1)?;
                }
                Event::Alias(id) => {
                    let Some((node, size)) = self.anchors.get(&id).cloned() else {
                        return fail(at, "alias to an unknown anchor");
                    };
                    self.expect_value(at)?;
                    self.count(size, at)?;
                    self.finish(node, 0, size)?;
                }
                Event::SequenceStart(anchor, _) => {
                    self.open(at)?;
                    self.stack.push(Frame::Seq {
                        items: Vec::new(),
                        at,
                        anchor,
                    });
                }
                Event::MappingStart(anchor, _) => {
                    self.open(at)?;
                    self.stack.push(Frame::Map {
                        entries: Vec::new(),
                        lines: HashMap::new(),
                        key: None,
                        at,
                        anchor,
                    });
                }
                Event::SequenceEnd => {
                    let Some(Frame::Seq { items, at, anchor }) = self.stack.pop() else {
                        return fail(at, "unbalanced sequence");
                    };
                    let size = 1 + items.iter().map(size_of_node).sum::<usize>();
                    self.count(1, at)?;
                    self.finish(
                        Node {
                            value: Value::Seq(items),
                            at,
                        },
                        anchor,
                        size,
                    )?;
                }
                Event::MappingEnd => {
                    let Some(Frame::Map {
                        entries,
                        at,
                        anchor,
                        ..
                    }) = self.stack.pop()
                    else {
                        return fail(at, "unbalanced mapping");
                    };
                    let entries = apply_merge_keys(entries)?;
                    let size = 1 + entries.iter().map(|(_, v)| size_of_node(v)).sum::<usize>();
                    self.count(1, at)?;
                    self.finish(
                        Node {
                            value: Value::Map(entries),
                            at,
                        },
                        anchor,
                        size,
                    )?;
                }
                Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            }
        }
        Ok(self.root.unwrap_or(Node {
            value: Value::Null,
            at: Position { line: 1, column: 1 },
        }))
    }

    /// A collection may not stand where a mapping key is expected.
    fn expect_value(&self, at: Position) -> Result<(), LoadError> {
        if let Some(Frame::Map { key: None, .. }) = self.stack.last() {
            return fail(at, "only plain scalar mapping keys are supported");
        }
        Ok(())
    }

    fn open(&self, at: Position) -> Result<(), LoadError> {
        self.expect_value(at)?;
        if self.stack.len() >= self.limits.max_depth {
            return fail(
                at,
                format!("nesting deeper than {} levels", self.limits.max_depth),
            );
        }
        Ok(())
    }

    fn count(&mut self, nodes: usize, at: Position) -> Result<(), LoadError> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > self.limits.max_nodes {
            return fail(
                at,
                format!(
                    "document expands to more than {} nodes (aliases included)",
                    self.limits.max_nodes
                ),
            );
        }
        Ok(())
    }

    fn finish(&mut self, node: Node, anchor: usize, size: usize) -> Result<(), LoadError> {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                lines,
                key,
                ..
            }) => {
                let key = key.take().expect("a value follows its key");
                if key.name != "<<" {
                    if let Some(first) = lines.get(&key.name) {
                        return fail(
                            key.at,
                            format!(
                                "duplicate key `{}` (first defined at line {first})",
                                key.name
                            ),
                        );
                    }
                    lines.insert(key.name.clone(), key.at.line);
                }
                entries.push((key, node));
            }
        }
        Ok(())
    }
}

fn size_of_node(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(size_of_node).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, v)| size_of_node(v)).sum::<usize>(),
        _ => 1,
    }
}

/// `<<: *base` (or a list of them) copies the entries the mapping does not set itself.
fn apply_merge_keys(entries: Vec<(Key, Node)>) -> Result<Vec<(Key, Node)>, LoadError> {
    if !entries.iter().any(|(k, _)| k.name == "<<") {
        return Ok(entries);
    }
    let (merges, mut own): (Vec<_>, Vec<_>) =
        entries.into_iter().partition(|(k, _)| k.name == "<<");
    let mut present: HashSet<String> = own.iter().map(|(k, _)| k.name.clone()).collect();
    for (key, source) in merges {
        let sources = match source.value {
            Value::Map(_) => vec![source],
            Value::Seq(items) => items,
            _ => {
                return fail(
                    key.at,
                    "a merge key `<<` needs a mapping or a list of mappings",
                );
            }
        };
        for source in sources {
            let Value::Map(inherited) = source.value else {
                return fail(
                    source.at,
                    "a merge key `<<` needs a mapping or a list of mappings",
                );
            };
            for (k, v) in inherited {
                if present.insert(k.name.clone()) {
                    own.push((k, v));
                }
            }
        }
    }
    Ok(own)
}

/// YAML 1.1's booleans and separated integers, else the core schema.
pub(crate) fn resolve_plain_1_1(text: &str) -> Value {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Value::Bool(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Value::Bool(false),
        _ => {}
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if text.contains('_')
        && digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && let Ok(i) = text.replace('_', "").parse::<i64>()
    {
        return Value::Int(i);
    }
    resolve_plain(text)
}

/// The YAML 1.2 core schema for plain scalars.
pub(crate) fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && let Ok(i) = text.parse::<i64>()
    {
        return Value::Int(i);
    }
    if let Some(hex) = text.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Value::Int(i);
    }
    if let Some(oct) = text.strip_prefix("0o")
        && let Ok(i) = i64::from_str_radix(oct, 8)
    {
        return Value::Int(i);
    }
    let looks_numeric = digits
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && digits.bytes().any(|b| b.is_ascii_digit());
    if looks_numeric && let Ok(f) = text.parse::<f64>() {
        return Value::Float(f);
    }
    Value::Str(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Node, LoadError> {
        load(text, Limits::default())
    }

    #[test]
    fn scalars_resolve_with_the_core_schema_and_keep_positions() {
        let root = parse("a: 1\nb: true\nc: 30s\nd: '5'\ne: ~\nf: 1.5\n").unwrap();
        assert_eq!(root.get("a").unwrap().value, Value::Int(1));
        assert_eq!(root.get("b").unwrap().value, Value::Bool(true));
        assert_eq!(root.get("c").unwrap().value, Value::Str("30s".into()));
        assert_eq!(root.get("d").unwrap().value, Value::Str("5".into()));
        assert_eq!(root.get("e").unwrap().value, Value::Null);
        assert_eq!(root.get("f").unwrap().value, Value::Float(1.5));
        let c = root.get("c").unwrap();
        assert_eq!(c.at, Position { line: 3, column: 4 });
        let keys = root.as_map().unwrap();
        assert_eq!(keys[3].0.at, Position { line: 4, column: 1 });
    }

    #[test]
    fn duplicate_keys_are_refused_naming_both_lines() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.at.line, 3);
        assert!(err.message.contains("duplicate key `a`"), "{err}");
        assert!(err.message.contains("line 1"), "{err}");
    }

    #[test]
    fn a_flat_mapping_of_100000_keys_loads_and_its_last_duplicate_is_found() {
        let mut text: String = (0..100_000).map(|i| format!("k{i}: {i}\n")).collect();
        let limits = Limits::default();
        let root = load(&text, limits).unwrap();
        assert_eq!(root.as_map().map(<[_]>::len), Some(100_000));
        assert_eq!(
            root.get("k99999").map(|n| &n.value),
            Some(&Value::Int(99_999))
        );
        text.push_str("k0: again\n");
        let err = load(&text, limits).unwrap_err();
        assert!(err.message.contains("duplicate key `k0`"), "{err}");
        assert_eq!(err.at.line, 100_001);
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.at.line >= 1, "{err}");
        assert!(!err.message.is_empty());
    }

    #[test]
    fn aliases_and_merge_keys_expand() {
        let root = parse("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n").unwrap();
        let other = root.get("other").unwrap();
        assert_eq!(other.get("x").unwrap().value, Value::Int(1));
        assert_eq!(other.get("y").unwrap().value, Value::Int(3));
    }

    #[test]
    fn an_alias_bomb_is_refused() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("more than"), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let doc = "[".repeat(100) + &"]".repeat(100);
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("nesting deeper"), "{err}");
    }

    #[test]
    fn oversized_input_is_refused() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::default()
        };
        let err = load("a: 12345678901234567890", limits).unwrap_err();
        assert!(err.message.contains("limit of 10 bytes"), "{err}");
    }

    #[test]
    fn more_than_one_document_is_refused() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(err.message.contains("one YAML document"), "{err}");
    }

    #[test]
    fn an_empty_document_is_null() {
        assert_eq!(parse("").unwrap().value, Value::Null);
    }
}
