//! What an id may be: the alphabet of conversation, message and agent ids. Both the engine
//! (checking what callers send) and the log (writing ids unquoted) need it, so it lives
//! apart from either.

/// Longest client-supplied conversation or message id.
pub const MAX_ID_LEN: usize = 128;

/// Whether `text` is an id: 1 to [`MAX_ID_LEN`] characters of `A-Z a-z 0-9 - _ . :`, the
/// alphabet of conversation, message and agent ids, safe in paths and logs.
pub fn is_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_ID_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}
