//! Opaque list cursors, bound to the filters they were made with.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::FieldErrors;

/// One page of a list and the cursor of the next page, if there is one.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Passed as `cursor` (with the same filters) for the next page; `None` on the last page.
    pub next_cursor: Option<String>,
    /// For each item, the cursor that continues after it (GraphQL connections' edges).
    pub cursors: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct CursorData {
    /// Position: the last key of the previous page.
    k: String,
    /// Fingerprint of the filters.
    f: String,
}

fn fingerprint(filters: &str) -> String {
    hex::encode(&Sha256::digest(filters.as_bytes())[..8])
}

/// Makes a cursor that continues after `key` under `filters`.
pub fn encode(key: &str, filters: &str) -> String {
    let data = CursorData {
        k: key.to_owned(),
        f: fingerprint(filters),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&data).expect("cursor serialises"))
}

/// Reads a cursor back, refusing one made for other filters.
pub fn decode(cursor: &str, filters: &str) -> Result<String, FieldErrors> {
    let invalid = || FieldErrors::single("cursor", "is not a cursor returned by this list");
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let data: CursorData = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if data.f != fingerprint(filters) {
        return Err(FieldErrors::single(
            "cursor",
            "was made for different filters; start again without a cursor",
        ));
    }
    Ok(data.k)
}

/// Builds a page from `limit + 1` fetched rows: the extra row only proves there is more.
pub fn page<T>(mut rows: Vec<T>, limit: i64, filters: &str, key: impl Fn(&T) -> String) -> Page<T> {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let cursors: Vec<String> = rows.iter().map(|row| encode(&key(row), filters)).collect();
    let next_cursor = if more { cursors.last().cloned() } else { None };
    Page {
        items: rows,
        next_cursor,
        cursors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_only_works_with_its_own_filters() {
        let cursor = encode("0193", "phase=Ready");
        assert_eq!(decode(&cursor, "phase=Ready").unwrap(), "0193");
        assert!(decode(&cursor, "phase=Failed").is_err());
        assert!(decode("garbage!", "phase=Ready").is_err());
    }
}
