//! Instance ids and deployment names come from servers and operators; encoded, they can
//! never add a path segment, a query or a fragment to the URL they are put into.

use std::fmt::Write;

use fleet_rollout::inventory::InventoryError;

/// Percent-encodes everything but the RFC 3986 unreserved characters.
///
/// `.` and `..` are refused rather than encoded because URL parsers treat `%2E` as a dot
/// too and would remove the segment, sending the request to another route; an empty
/// segment would merge with its neighbour the same way.
pub fn segment(raw: &str) -> Result<String, InventoryError> {
    if matches!(raw, "" | "." | "..") {
        return Err(InventoryError::permanent(format!(
            "`{raw}` cannot be used as a name in a URL path"
        )));
    }
    let mut encoded = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    Ok(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_stay_as_they_are() {
        assert_eq!(segment("abc-XYZ_0.9~").unwrap(), "abc-XYZ_0.9~");
    }

    #[test]
    fn separators_and_percent_signs_are_encoded() {
        assert_eq!(segment("a b/c?d#e%f").unwrap(), "a%20b%2Fc%3Fd%23e%25f");
        assert_eq!(segment("*").unwrap(), "%2A");
    }

    #[test]
    fn non_ascii_text_is_encoded_byte_by_byte_in_upper_case() {
        assert_eq!(segment("ü").unwrap(), "%C3%BC");
    }

    #[test]
    fn dot_segments_and_empty_names_are_refused() {
        for raw in ["", ".", ".."] {
            assert!(segment(raw).is_err(), "{raw:?} must be refused");
        }
        assert_eq!(segment("...").unwrap(), "...");
    }
}
