//! The code a newcomer copies from the README (and docs/macro.md) is code CI compiles and
//! runs: every Rust block is, byte for byte, a whole file of a crate in `examples/` (which
//! `scripts/test.sh` builds, lints and tests), and every TOML block parses and is part of
//! one of those crates' manifests, its `…/` paths standing for the repository root.

use std::path::{Path, PathBuf};

/// The documents whose blocks are checked.
const DOCS: &[&str] = &["README.md", "docs/macro.md", "examples/README.md"];

/// The files Rust blocks may show, and which document must show each.
const RUST_FILES: &[(&str, &str)] = &[
    ("examples/build-script/build.rs", "README.md"),
    ("examples/build-script/src/lib.rs", "README.md"),
    ("examples/macro/src/lib.rs", "README.md"),
    ("examples/macro/src/lib.rs", "docs/macro.md"),
    ("examples/zero-to-layer/src/main.rs", "README.md"),
];

/// The manifests TOML blocks are excerpts of.
const MANIFESTS: &[&str] = &[
    "examples/build-script/Cargo.toml",
    "examples/macro/Cargo.toml",
    "examples/zero-to-layer/Cargo.toml",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced blocks of a Markdown text: (info string, body with its final newline).
fn blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in md.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(rest)) if rest.trim().is_empty() => out.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

#[test]
fn every_rust_block_is_a_whole_example_file() {
    for doc in DOCS {
        let text = read(doc);
        let mut shown = Vec::new();
        for (i, (info, body)) in blocks(&text).into_iter().enumerate() {
            if !info.starts_with("rust") {
                continue;
            }
            // `rust,ignore` and the like would let a block escape compilation.
            assert_eq!(info, "rust", "{doc}, block {i}: only plain ```rust blocks");
            let file =
                RUST_FILES.iter().map(|(f, _)| *f).find(|f| read(f) == body).unwrap_or_else(|| {
                    panic!(
                        "{doc}, block {i} (starting {:?}) is not the text of any of {RUST_FILES:?}",
                        body.lines().next().unwrap_or("")
                    )
                });
            shown.push(file);
        }
        for (file, _) in RUST_FILES.iter().filter(|(_, d)| d == doc) {
            assert!(shown.contains(file), "{doc} no longer shows {file}");
        }
    }
}

/// Whether every key of `part` is in `whole` with the same value (tables recursively; a
/// string's leading `…/` is the repository root, `../../` from an example crate).
fn contained(part: &toml::Table, whole: &toml::Table) -> Result<(), String> {
    for (key, value) in part {
        let Some(other) = whole.get(key) else { return Err(format!("no key `{key}`")) };
        match (value, other) {
            (toml::Value::Table(p), toml::Value::Table(w)) => {
                contained(p, w).map_err(|e| format!("{key}.{e}"))?
            }
            (toml::Value::String(s), _) => {
                let s = s.replace("…/", "../../");
                if toml::Value::String(s.clone()) != *other {
                    return Err(format!("`{key}` is {s:?}, the manifest has {other}"));
                }
            }
            _ if value != other => {
                return Err(format!("`{key}` is {value}, the manifest has {other}"));
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn every_toml_block_parses_and_is_part_of_an_example_manifest() {
    let manifests: Vec<(&str, toml::Table)> = MANIFESTS
        .iter()
        .map(|m| (*m, read(m).parse::<toml::Table>().unwrap_or_else(|e| panic!("{m}: {e}"))))
        .collect();
    let mut checked = 0;
    for doc in DOCS {
        for (i, (info, body)) in blocks(&read(doc)).into_iter().enumerate() {
            if info != "toml" {
                continue;
            }
            let table: toml::Table =
                body.parse().unwrap_or_else(|e| panic!("{doc}, block {i} is not TOML: {e}"));
            let misses: Vec<String> = manifests
                .iter()
                .map(|(m, whole)| contained(&table, whole).map_err(|e| format!("{m}: {e}")))
                .filter_map(Result::err)
                .collect();
            assert!(
                misses.len() < manifests.len(),
                "{doc}, block {i} is part of no example manifest:\n{}",
                misses.join("\n")
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} TOML blocks: the README and docs/macro.md have more");
}

#[test]
fn the_block_parser_finds_what_it_should() {
    let md = "a\n```rust\nfn f() {}\n```\n```toml\n[x]\ny = 1\n```\n```\nplain\n```\n";
    assert_eq!(
        blocks(md),
        [
            ("rust".to_string(), "fn f() {}\n".to_string()),
            ("toml".to_string(), "[x]\ny = 1\n".to_string()),
            (String::new(), "plain\n".to_string()),
        ]
    );
}
