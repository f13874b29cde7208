//! Text from outside (instance ids from a broker, names and messages from API users) may
//! carry terminal control sequences: an ESC or OSC sequence in a deployment name would
//! recolour, retitle or rewrite an operator's terminal. Every human output goes through
//! [`printable`], which shows control characters as escapes instead of sending them.

use std::borrow::Cow;

/// `text` with every control character but line feed and tab written as `\u{..}`.
pub fn printable(text: &str) -> Cow<'_, str> {
    let hostile = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        assert!(matches!(printable("plain text\n\tok"), Cow::Borrowed(_)));
        let shown = printable("db\u{1b}]0;owned\u{7} \u{1b}[31mred\r\u{9b}");
        assert_eq!(shown, "db\\u{1b}]0;owned\\u{7} \\u{1b}[31mred\\u{d}\\u{9b}");
        assert!(!shown.chars().any(|c| c.is_control()));
    }
}
