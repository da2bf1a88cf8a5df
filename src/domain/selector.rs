//! Kubernetes label selectors (`team=a,tier!=gpu,env in (dev,prod),!legacy`) for list filters.

use super::names::{validate_label_key, validate_label_value};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<LabelRequirement>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_terms(s)? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term)?);
        }
        Ok(Self(requirements))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("unbalanced parentheses in `{s}`"));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced parentheses in `{s}`"));
    }
    terms.push(&s[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<LabelRequirement, String> {
    let key = |k: &str| -> Result<String, String> {
        let k = k.trim();
        validate_label_key(k)?;
        Ok(k.to_owned())
    };
    let value = |v: &str| -> Result<String, String> {
        let v = v.trim();
        validate_label_value(v)?;
        Ok(v.to_owned())
    };
    if let Some(k) = term.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(key(k)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(key(k)?, value(v)?));
    }
    for (op, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = term.split_once(op) {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("`{term}`: expected a parenthesised list of values"))?;
            let values = inner.split(',').map(value).collect::<Result<Vec<_>, _>>()?;
            return Ok(if notin {
                LabelRequirement::NotIn(key(k)?, values)
            } else {
                LabelRequirement::In(key(k)?, values)
            });
        }
    }
    Ok(LabelRequirement::Exists(key(term)?))
}

#[cfg(test)]
mod tests {
    use super::LabelRequirement::*;
    use super::*;

    #[test]
    fn parses_every_operator() {
        let sel = LabelSelector::parse("a=1,b==2,c!=3,d in (x, y),e notin (z),f,!g").unwrap();
        assert_eq!(
            sel.0,
            vec![
                Equals("a".into(), "1".into()),
                Equals("b".into(), "2".into()),
                NotEquals("c".into(), "3".into()),
                In("d".into(), vec!["x".into(), "y".into()]),
                NotIn("e".into(), vec!["z".into()]),
                Exists("f".into()),
                DoesNotExist("g".into()),
            ]
        );
    }

    #[test]
    fn refuses_malformed_selectors() {
        for bad in ["a in (x", "a in x", "bad key=1", "a=has space", "a=(b"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }
}
