//! The layers `src/lib.rs` states hold: each top-level module of the crate imports only
//! modules listed before it under "Layers, bottom up", so the crate has no import circle
//! and the list is the crate's real order, not a wish.
//!
//! The list in `lib.rs` is the one place the order is written: this test reads it, reads
//! every `src/**/*.rs`, finds each `crate::X` path outside comments, strings and test-only
//! code (`#[cfg(test)]` items and the files of `#[cfg(test)] mod x;`), and fails on a path
//! to a module at or above the importing one. Doc links (`[`crate::x::Y`]`) are comments
//! and do not count: a doc may point anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A token of Rust source, as far as this test needs: identifiers, and single punctuation
/// characters (`::` is two `:`). Comments, strings and character literals are dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(char),
}

/// Tokens of `text`, each with its line (1-based).
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skip to the end of a quoted literal opened at `i` (the quote), honouring escapes.
    let skip_quoted = |i: &mut usize, line: &mut usize, q: char| {
        *i += 1;
        while *i < c.len() && c[*i] != q {
            if c[*i] == '\\' {
                *i += 1;
            }
            if *i < c.len() && c[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            skip_quoted(&mut i, &mut line, '"');
        } else if ch == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                skip_quoted(&mut i, &mut line, '\'');
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw and byte strings: r"..", r#".."#, b"..", br"..".
            let raw = word == "r" || word == "br";
            if (raw || word == "b") && i < c.len() && (c[i] == '"' || (raw && c[i] == '#')) {
                if raw {
                    let mut hashes = 0;
                    while c[i] == '#' {
                        hashes += 1;
                        i += 1;
                    }
                    i += 1;
                    loop {
                        if i >= c.len() {
                            break;
                        }
                        if c[i] == '\n' {
                            line += 1;
                        }
                        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                } else {
                    skip_quoted(&mut i, &mut line, '"');
                }
                continue;
            }
            out.push((Tok::Ident(word), line));
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

fn is_punct(t: Option<&(Tok, usize)>, p: char) -> bool {
    matches!(t, Some((Tok::Punct(q), _)) if *q == p)
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

/// Is `toks[i..]` the attribute `#[cfg(test)]`?
fn cfg_test_at(toks: &[(Tok, usize)], i: usize) -> bool {
    is_punct(toks.get(i), '#')
        && is_punct(toks.get(i + 1), '[')
        && ident(toks.get(i + 2)) == Some("cfg")
        && is_punct(toks.get(i + 3), '(')
        && ident(toks.get(i + 4)) == Some("test")
        && is_punct(toks.get(i + 5), ')')
        && is_punct(toks.get(i + 6), ']')
}

/// The index after the item starting at `i`: its `;` or its closing `}` at depth 0.
fn item_end(toks: &[(Tok, usize)], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        if let Tok::Punct(p) = toks[i].0 {
            match p {
                '{' | '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                ';' if depth == 0 => return i + 1,
                _ => {}
            }
        }
        i += 1;
    }
    i
}

/// What one file imports: (top-level module named after `crate::`, line), outside
/// test-only items; and the `mod x;` files it declares test-only.
fn imports(text: &str) -> (Vec<(String, usize)>, Vec<String>) {
    let toks = lex(text);
    let mut found = Vec::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if cfg_test_at(&toks, i) {
            let end = item_end(&toks, i + 7);
            // `#[cfg(test)] mod x;`: x's file is test code.
            if ident(toks.get(i + 7)) == Some("mod") && is_punct(toks.get(i + 9), ';') {
                test_mods.push(ident(toks.get(i + 8)).unwrap_or_default().to_string());
            }
            i = end;
            continue;
        }
        let path_start = ident(toks.get(i)) == Some("crate")
            && is_punct(toks.get(i + 1), ':')
            && is_punct(toks.get(i + 2), ':')
            // `$crate` belongs to macros, which this crate does not export.
            && !is_punct(i.checked_sub(1).and_then(|j| toks.get(j)), '$');
        if !path_start {
            i += 1;
            continue;
        }
        let line = toks[i].1;
        i += 3;
        if let Some(m) = ident(toks.get(i)) {
            found.push((m.to_string(), line));
        } else if is_punct(toks.get(i), '{') {
            // `crate::{a::X, b}`: the first name of each entry at the group's own depth.
            let mut depth = 0;
            let mut expect = true;
            while i < toks.len() {
                match &toks[i].0 {
                    Tok::Punct('{') => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if depth == 1 => expect = true,
                    Tok::Ident(m) if expect => {
                        found.push((m.clone(), toks[i].1));
                        expect = false;
                    }
                    _ => expect = false,
                }
                i += 1;
            }
        }
    }
    (found, test_mods)
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to: `flow/walk.rs` and `flow.rs` are `flow`.
fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The modules of lib.rs's "Layers, bottom up" list, in its order.
fn stated_layers(lib: &str) -> Vec<String> {
    let mut order = Vec::new();
    let mut inside = false;
    for l in lib.lines() {
        let Some(doc) = l.strip_prefix("//!") else {
            if inside {
                break;
            }
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with("Layers, bottom up") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if doc.is_empty() {
            break;
        }
        let mut rest = doc;
        while let Some(a) = rest.find("[`") {
            let after = &rest[a + 2..];
            let b = after.find("`]").expect("a [`name`] link closes");
            // A path (`timing::Clock`) is a link to an item, not a layer.
            if !after[..b].contains("::") {
                order.push(after[..b].to_string());
            }
            rest = &after[b + 2..];
        }
    }
    order
}

/// Every import of a top-level module by another, outside test code: (importer, imported)
/// to the places (file:line) that make it.
fn import_graph() -> BTreeMap<(String, String), Vec<String>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut per_file = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let (found, test_mods) = imports(&text);
        // `mod x;` in `a/mod.rs` or `lib.rs` is `a/x.rs`; in `a.rs` it is `a/x.rs` too.
        let dir = if f
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            f.parent().unwrap().to_path_buf()
        } else {
            f.with_extension("")
        };
        for m in test_mods {
            test_files.insert(dir.join(format!("{m}.rs")));
            test_files.insert(dir.join(m).join("mod.rs"));
        }
        per_file.push((f.clone(), found));
    }
    let mut graph: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (f, found) in per_file {
        let rel = f.strip_prefix(&root).unwrap();
        if rel == Path::new("lib.rs") || test_files.iter().any(|t| f.starts_with(t)) {
            continue;
        }
        let from = module_of(rel);
        for (to, line) in found {
            if to != from {
                let at = format!("src/{}:{line}", rel.display());
                graph.entry((from.clone(), to)).or_default().push(at);
            }
        }
    }
    graph
}

#[test]
fn lib_rs_layers_name_every_module_once() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let order = stated_layers(&lib);
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(src()).unwrap()))
        .filter(|m| m != "lib")
        .collect();
    let listed: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        listed.len(),
        order.len(),
        "a module listed twice: {order:?}"
    );
    assert_eq!(
        listed, modules,
        "lib.rs's \"Layers, bottom up\" must list each module of src/ once"
    );
}

#[test]
fn each_module_imports_only_the_layers_below_it() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let order = stated_layers(&lib);
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut upward = Vec::new();
    for ((from, to), at) in import_graph() {
        let (Some(f), Some(t)) = (rank(&from), rank(&to)) else {
            continue; // an unlisted module: the test above names it
        };
        if t >= f {
            upward.push(format!(
                "{from} imports {to} (listed after it): {}",
                at.join(", ")
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports against lib.rs's \"Layers, bottom up\":\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_groups_and_test_code() {
    let text = r##"
//! [`crate::flow::Walker`] is a doc link, not an import.
use crate::{block::{BlockCache, BlockEnd}, image};
use crate::rows::BranchRow;
fn f() -> crate::piece::Piece { let s = "crate::chunk::Input"; let c = '{'; todo!() }
#[cfg(test)]
use crate::sink::RowSink;
#[cfg(test)]
mod tests {
    use crate::tally::Covered;
}
#[cfg(test)]
mod more;
fn g<'a>(x: &'a str) -> crate::coverage::Coverage { let r = r#"crate::memo"#; todo!() }
"##;
    let (found, test_mods) = imports(text);
    let names: Vec<&str> = found.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(names, ["block", "image", "rows", "piece", "coverage"]);
    assert_eq!(found[2].1, 4, "lines are counted");
    assert_eq!(test_mods, ["more"]);
    let layers = stated_layers(
        "//! Intro.\n//!\n//! Layers, bottom up:\n//! - [`a`]: x;\n//!   [`b`], [`c`]: y, [`c::Y`]\n//!\n//! [`d`]\n",
    );
    assert_eq!(layers, ["a", "b", "c"]);
}
