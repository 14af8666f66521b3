//! Reading a [`Map`]'s keys and values into Rust values, each failure a `syn::Error` on the
//! token responsible.

use proc_macro2::Span;
use syn::{Error, Ident, LitInt};

use crate::value::{Map, Value};

/// The keys of one map, checked against the keys it may hold.
pub struct Keys<'a> {
    map: &'a Map,
}

impl<'a> Keys<'a> {
    /// Refuses a key not in `allowed` and a key given twice (blaming the second).
    pub fn new(map: &'a Map, what: &str, allowed: &[&str]) -> syn::Result<Self> {
        for (i, e) in map.entries.iter().enumerate() {
            let key = e.key.to_string();
            if !allowed.contains(&key.as_str()) {
                let msg = format!("unknown key `{key}` in {what}; expected {}", one_of(allowed));
                return Err(Error::new(e.key.span(), msg));
            }
            if map.entries[..i].iter().any(|p| p.key == e.key) {
                return Err(Error::new(e.key.span(), format!("duplicate key `{key}` in {what}")));
            }
        }
        Ok(Self { map })
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.entries.iter().find(|e| e.key == key).map(|e| &e.value)
    }

    /// The key token of `key`, if given.
    pub fn key(&self, key: &str) -> Option<&'a Ident> {
        self.map.entries.iter().find(|e| e.key == key).map(|e| &e.key)
    }

    /// The value of `key`, which must be given.
    pub fn require(&self, key: &str, what: &str) -> syn::Result<&'a Value> {
        self.get(key).ok_or_else(|| Error::new(self.map.span, format!("{what} needs `{key}`")))
    }
}

/// `a, b or c` in backticks.
pub fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

/// A positive integer literal that fits `u32`.
pub fn int(v: &Value, what: &str) -> syn::Result<(u32, Span)> {
    match v {
        Value::Int(lit) => Ok((parse_u32(lit)?, lit.span())),
        _ => Err(Error::new(v.span(), format!("{what}: expected an integer"))),
    }
}

fn parse_u32(lit: &LitInt) -> syn::Result<u32> {
    if !lit.suffix().is_empty() {
        return Err(Error::new(lit.span(), "write the number without a type suffix"));
    }
    lit.base10_parse()
}

/// `[M, N]`.
pub fn pair(v: &Value, what: &str) -> syn::Result<([u32; 2], [Span; 2])> {
    let expected = || Error::new(v.span(), format!("{what}: expected `[M, N]`"));
    let Value::List(list) = v else { return Err(expected()) };
    let [m, n] = list.items.as_slice() else { return Err(expected()) };
    let (m, ms) = int(m, what)?;
    let (n, ns) = int(n, what)?;
    Ok(([m, n], [ms, ns]))
}

/// One of a fixed set of identifiers, each standing for a `T`.
pub fn choice<T: Copy>(v: &Value, what: &str, options: &[(&str, T)]) -> syn::Result<T> {
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let bad =
        |got: String| Error::new(v.span(), format!("{what}: {got}; expected {}", one_of(&names)));
    let Value::Ident(id) = v else { return Err(bad("not a name".into())) };
    options
        .iter()
        .find(|(n, _)| id == n)
        .map(|(_, t)| *t)
        .ok_or_else(|| bad(format!("unknown value `{id}`")))
}

/// The items of a `[list]`, refusing an empty one when `non_empty`.
pub fn list<'v>(v: &'v Value, what: &str, non_empty: bool) -> syn::Result<&'v [Value]> {
    let Value::List(list) = v else {
        return Err(Error::new(v.span(), format!("{what}: expected a `[list]`")));
    };
    if non_empty && list.items.is_empty() {
        let msg = format!(
            "{what}: the list is empty; name at least one, or leave the key out for the default"
        );
        return Err(Error::new(list.span, msg));
    }
    Ok(&list.items)
}

/// A list of choices with their tokens, none given twice.
pub fn choices<T: Copy + PartialEq>(
    v: &Value,
    what: &str,
    options: &[(&str, T)],
    non_empty: bool,
) -> syn::Result<Vec<(T, Span)>> {
    let mut out: Vec<(T, Span)> = Vec::new();
    for item in list(v, what, non_empty)? {
        let t = choice(item, what, options)?;
        if out.iter().any(|(o, _)| *o == t) {
            return Err(Error::new(item.span(), format!("{what}: listed twice")));
        }
        out.push((t, item.span()));
    }
    Ok(out)
}

/// A `{map}`.
pub fn map<'v>(v: &'v Value, what: &str) -> syn::Result<&'v Map> {
    match v {
        Value::Map(m) => Ok(m),
        _ => Err(Error::new(v.span(), format!("{what}: expected a `{{ key: value, … }}` map"))),
    }
}
