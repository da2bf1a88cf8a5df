//! Go regular expressions: RE2 patterns, as the API server compiles them, run on Rust's
//! `regex` engine.

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};

use regex::Regex;

static REGEXES: LazyLock<RwLock<HashMap<String, Option<Regex>>>> = LazyLock::new(Default::default);

/// Compiles (once) a Go RE2 pattern. `None` when Rust's engine cannot take it: the check
/// is then skipped, since the API server accepted the pattern.
pub(super) fn go_regex(pattern: &str) -> Option<Regex> {
    if let Some(re) = REGEXES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(pattern)
    {
        return re.clone();
    }
    let re = Regex::new(&translate_go_regex(pattern)).ok();
    REGEXES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pattern.to_string(), re.clone());
    re
}

/// Go's `\d`, `\w` and `\s` are ASCII classes (Rust's are Unicode); inside a class, Go takes
/// `[`, `&` and `~` literally where Rust reads nested classes and set operations.
fn translate_go_regex(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 16);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(n) => match ascii_class(n) {
                    Some(class) => out.push_str(class),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                },
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.next_if_eq(&'^').is_some() {
                    out.push('^');
                }
                if chars.next_if_eq(&']').is_some() {
                    out.push_str("\\]");
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class such as [:alpha:], copied whole.
                out.push('[');
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// RE2's Perl classes, as (nestable) bracket classes.
fn ascii_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        's' => "[\\t\\n\\f\\r ]",
        'S' => "[^\\t\\n\\f\\r ]",
        _ => return None,
    })
}
