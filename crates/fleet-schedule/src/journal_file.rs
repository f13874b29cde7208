//! The journal on disk: a header line naming the run's intent, then one line for each
//! thing done, appended and flushed to disk as it happens. Writing stays as cheap for the
//! ten-thousandth instance as for the first, where rewriting the whole file after every
//! instance grew with the square of the fleet. A kill in the middle of an append leaves a
//! last line cut short, which reading drops: that instance is done again, never skipped.
//! A journal in the first format (one JSON document, rewritten whole) is still read.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The format of the header line.
const SCHEMA: u32 = 2;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    schema: u32,
    intent: String,
    /// Unix seconds of the first run.
    started_at: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
enum Entry {
    Done { id: String, at: u64 },
    CanariesPassed { at: u64 },
}

/// The first format: the whole journal as one document.
#[derive(Debug, Deserialize)]
struct Whole {
    schema: u32,
    intent: String,
    canaries_passed: bool,
    done: BTreeSet<String>,
    started_at: u64,
    updated_at: u64,
}

/// What a journal file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    pub intent: String,
    pub canaries_passed: bool,
    pub done: BTreeSet<String>,
    /// Unix seconds of the first run and of the last thing done.
    pub started_at: u64,
    pub updated_at: u64,
    /// More can be appended as it is: the file is in this format and ends with a whole
    /// line. Otherwise the next write rewrites it whole first.
    pub appendable: bool,
}

/// Reads a journal file.
///
/// # Errors
/// A header or a line before the last that is not the journal's.
pub fn parse(bytes: &[u8]) -> Result<Contents, serde_json::Error> {
    let header_end = bytes.iter().position(|&b| b == b'\n');
    let first = &bytes[..header_end.unwrap_or(bytes.len())];
    let header: Header = match serde_json::from_slice(first) {
        Ok(header) => header,
        // Not a header line: the first format, or damage.
        Err(e) => {
            return match serde_json::from_slice::<Whole>(bytes) {
                Ok(whole) if whole.schema == 1 => Ok(Contents {
                    intent: whole.intent,
                    canaries_passed: whole.canaries_passed,
                    done: whole.done,
                    started_at: whole.started_at,
                    updated_at: whole.updated_at,
                    appendable: false,
                }),
                _ => Err(e),
            };
        }
    };
    let mut contents = Contents {
        intent: header.intent,
        canaries_passed: false,
        done: BTreeSet::new(),
        started_at: header.started_at,
        updated_at: header.started_at,
        appendable: header.schema == SCHEMA && bytes.ends_with(b"\n"),
    };
    let rest = header_end.map_or(&[][..], |end| &bytes[end + 1..]);
    let lines: Vec<&[u8]> = rest.split(|&b| b == b'\n').collect();
    for (n, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        let entry: Entry = match serde_json::from_slice(line) {
            Ok(entry) => entry,
            // The last line, cut short by a kill: what it was about is done again.
            Err(_) if n + 1 == lines.len() => break,
            Err(e) => return Err(e),
        };
        let at = match entry {
            Entry::Done { id, at } => {
                contents.done.insert(id);
                at
            }
            Entry::CanariesPassed { at } => {
                contents.canaries_passed = true;
                at
            }
        };
        contents.updated_at = contents.updated_at.max(at);
    }
    Ok(contents)
}

/// The whole file for `contents`: what a journal starts with, or is rewritten to when it
/// cannot be appended to as it is.
pub fn whole(contents: &Contents, now: u64) -> Vec<u8> {
    let mut text = line(&Header {
        schema: SCHEMA,
        intent: contents.intent.clone(),
        started_at: contents.started_at,
    });
    if contents.canaries_passed {
        text.push_str(&line(&Entry::CanariesPassed { at: now }));
    }
    for id in &contents.done {
        text.push_str(&line(&Entry::Done {
            id: id.clone(),
            at: now,
        }));
    }
    text.into_bytes()
}

/// One line recording that `id` is done.
pub fn done(id: &str, now: u64) -> String {
    line(&Entry::Done {
        id: id.to_string(),
        at: now,
    })
}

/// One line recording that the canaries passed.
pub fn canaries_passed(now: u64) -> String {
    line(&Entry::CanariesPassed { at: now })
}

fn line(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string(value).expect("a journal line serializes");
    text.push('\n');
    text
}

/// Opens the journal at `path` to append to.
///
/// # Errors
/// The file cannot be opened.
pub fn open_for_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().append(true).open(path)
}

/// Appends `line` and flushes it to disk before returning: once a caller goes on, the
/// line survives a crash.
///
/// # Errors
/// The write or the flush failed.
pub fn append(file: &mut std::fs::File, line: &str) -> std::io::Result<()> {
    file.write_all(line.as_bytes())?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents() -> Contents {
        Contents {
            intent: "update".into(),
            canaries_passed: true,
            done: BTreeSet::from(["a".to_string(), "b".to_string()]),
            started_at: 100,
            updated_at: 100,
            appendable: true,
        }
    }

    #[test]
    fn a_journal_written_whole_then_appended_to_reads_back() {
        let mut bytes = whole(&contents(), 100);
        bytes.extend_from_slice(done("c", 250).as_bytes());
        let read = parse(&bytes).unwrap();
        assert_eq!(
            read.done,
            BTreeSet::from(["a".to_string(), "b".to_string(), "c".to_string()])
        );
        assert!(read.canaries_passed && read.appendable);
        assert_eq!((read.started_at, read.updated_at), (100, 250));
    }

    #[test]
    fn a_last_line_cut_short_is_dropped_and_the_next_write_rewrites_the_file() {
        let mut bytes = whole(&contents(), 100);
        let cut = done("c", 250);
        bytes.extend_from_slice(&cut.as_bytes()[..cut.len() / 2]);
        let read = parse(&bytes).unwrap();
        assert!(!read.done.contains("c"), "{read:?}");
        assert_eq!(read.done.len(), 2);
        assert!(
            !read.appendable,
            "appending after half a line would damage the file"
        );
    }

    #[test]
    fn damage_before_the_last_line_is_refused() {
        let mut bytes = whole(&contents(), 100);
        bytes.extend_from_slice(b"{not json\n");
        bytes.extend_from_slice(done("c", 250).as_bytes());
        assert!(parse(&bytes).is_err());
        assert!(parse(b"{not json").is_err());
    }

    #[test]
    fn a_journal_in_the_first_format_is_read_and_rewritten_on_the_next_write() {
        let first = serde_json::json!({
            "schema": 1,
            "intent": "update",
            "canaries_passed": true,
            "done": ["a", "b"],
            "started_at": 100,
            "updated_at": 200,
        });
        let read = parse(&serde_json::to_vec_pretty(&first).unwrap()).unwrap();
        assert_eq!(
            read,
            Contents {
                updated_at: 200,
                appendable: false,
                ..contents()
            }
        );
    }
}
