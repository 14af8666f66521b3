//! The macro's surface grammar: `key: value` maps whose values are integers, identifiers,
//! `[lists]` or `{maps}`. Parsing keeps every token's span; meaning is given in `spec.rs`,
//! so one parser serves every key and unknown or duplicate keys are caught in one place.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitInt, Token, braced, bracketed};

/// One value with its span.
#[derive(Clone)]
pub enum Value {
    /// `128`.
    Int(LitInt),
    /// `sm_100f`, `bf16`, …
    Ident(Ident),
    /// `[a, b, …]`.
    List(List),
    /// `{ key: value, … }`.
    Map(Map),
}

/// `[a, b, …]`.
#[derive(Clone)]
pub struct List {
    /// The brackets and everything between them.
    pub span: Span,
    /// The items.
    pub items: Vec<Value>,
}

/// `{ key: value, … }` (also the body of `mod name { … }`).
#[derive(Clone)]
pub struct Map {
    /// The braces and everything between them.
    pub span: Span,
    /// The entries, in source order (duplicates are kept for `Keys` to report).
    pub entries: Vec<Entry>,
}

/// `key: value`.
#[derive(Clone)]
pub struct Entry {
    /// The key.
    pub key: Ident,
    /// The value.
    pub value: Value,
}

impl Value {
    /// The span to blame for this value.
    pub fn span(&self) -> Span {
        match self {
            Value::Int(l) => l.span(),
            Value::Ident(i) => i.span(),
            Value::List(l) => l.span,
            Value::Map(m) => m.span,
        }
    }
}

impl Parse for Value {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let look = input.lookahead1();
        if look.peek(LitInt) {
            input.parse().map(Value::Int)
        } else if look.peek(syn::token::Bracket) {
            let content;
            let bracket = bracketed!(content in input);
            let items = Punctuated::<Value, Token![,]>::parse_terminated(&content)?;
            Ok(Value::List(List { span: bracket.span.join(), items: items.into_iter().collect() }))
        } else if look.peek(syn::token::Brace) {
            let content;
            let brace = braced!(content in input);
            Ok(Value::Map(Map::parse_entries(&content, brace.span.join())?))
        } else if look.peek(Ident::peek_any) {
            // `Ident::parse_any` so that a keyword is reported as an unknown value, not as
            // a syntax error far from the point.
            Ident::parse_any(input).map(Value::Ident)
        } else {
            Err(look.error())
        }
    }
}

impl Map {
    /// The entries of a brace group's contents.
    pub fn parse_entries(content: ParseStream, span: Span) -> syn::Result<Self> {
        let entries = Punctuated::<Entry, Token![,]>::parse_terminated(content)?;
        Ok(Map { span, entries: entries.into_iter().collect() })
    }
}

impl Parse for Entry {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = Ident::parse_any(input)?;
        input.parse::<Token![:]>()?;
        let value = input.parse()?;
        Ok(Entry { key, value })
    }
}
