use std::fmt;

/// Where a node starts in its source text; lines and columns count from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A mapping key. Keys are always strings here: neither our configuration nor BOSH
/// manifests use other key types, and a non-string key is reported as such by the loader.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub at: Position,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub at: Position,
}

/// Scalars are resolved with the YAML 1.2 core schema; quoted scalars are always strings.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; duplicate keys are rejected when loading.
    Map(Vec<(Key, Node)>),
}

impl Value {
    /// The word used in messages for the type that was found.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl Node {
    pub fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Looks a key up in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(_, v)| v)
    }

    /// The node's value converted to JSON, dropping positions; used where a subtree is
    /// free-form (BOSH `properties`) or passed on opaquely.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// A JSON value as a node, every position `at`: for values that came from elsewhere (a
/// variable) and stand where a node of the document stood.
pub fn from_json_at(value: &serde_json::Value, at: Position) -> Node {
    let value = match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(items) => {
            Value::Seq(items.iter().map(|v| from_json_at(v, at)).collect())
        }
        serde_json::Value::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| {
                    (
                        Key {
                            name: k.clone(),
                            at,
                        },
                        from_json_at(v, at),
                    )
                })
                .collect(),
        ),
    };
    Node { value, at }
}

/// A JSON value as a node, for rendering it as YAML.
pub fn from_json(value: &serde_json::Value) -> Node {
    from_json_at(value, Position::default())
}
