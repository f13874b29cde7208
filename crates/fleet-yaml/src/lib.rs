//! A YAML document as a tree whose every node remembers where it was written.
//!
//! Configuration files and deployment manifests are validated by walking this tree, so that
//! every problem can name its key and line, and so that all problems are reported in one
//! pass instead of stopping at the first serde error. Loading enforces limits (input size,
//! nesting depth, node count after alias expansion) so that hostile input cannot exhaust
//! memory.

mod canonical;
mod check;
mod load;
mod node;

pub use canonical::{render, same};
pub use check::{Checker, Problem, describe, join, nearest};
pub use load::{Limits, LoadError, load, load_as_director};
pub use node::{Key, Node, Position, Value, from_json, from_json_at};
