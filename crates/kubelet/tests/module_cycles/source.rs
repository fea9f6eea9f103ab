//! Reading `src/`: module paths from file names, and the module paths each file names.

use std::path::{Path, PathBuf};

use super::Graph;

/// The fine graph: nodes at depth one or two, edges with where they were first seen.
pub fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    files.sort();
    let tree = ModuleTree { src };
    let mut graph = Graph::new();
    for file in &files {
        let rel = file.strip_prefix(src).unwrap_or(file);
        let Some(module) = tree.file_module(rel) else {
            continue; // lib.rs declares the modules; it is not one.
        };
        let me = tree.node(&module);
        graph.entry(me.clone()).or_default();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => panic!("reading {}: {e}", file.display()),
        };
        let code = strip_comments_and_strings(&text);
        for (offset, path) in paths(&code, &module, &tree) {
            let Some(to) = tree.resolve(&path) else {
                continue;
            };
            if to != me {
                let line = code[..offset].matches('\n').count() + 1;
                graph
                    .entry(me.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| (rel.display().to_string(), line));
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module paths from file names.
pub struct ModuleTree<'a> {
    pub src: &'a Path,
}

impl ModuleTree<'_> {
    /// Whether `segs` (from the crate root) names a module file or directory.
    fn is_module(&self, segs: &[String]) -> bool {
        let p = segs.iter().fold(self.src.to_path_buf(), |p, s| p.join(s));
        p.with_extension("rs").is_file() || p.join("mod.rs").is_file()
    }

    /// The module a file is (its tests counting as the module they test); `None` for `lib.rs`.
    fn file_module(&self, rel: &Path) -> Option<Vec<String>> {
        let mut segs: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if segs.last().is_some_and(|s| s == "mod") {
            segs.pop();
        }
        if segs == ["lib"] {
            return None;
        }
        let last = segs.last()?.clone();
        if last == "tests" {
            segs.pop();
        } else if let Some(base) = last.strip_suffix("_tests") {
            segs.pop();
            let mut tested = segs.clone();
            tested.push(base.to_string());
            if self.is_module(&tested) {
                segs = tested;
            }
        }
        (!segs.is_empty()).then_some(segs)
    }

    /// The graph node of a module: its first two segments when the first is a directory.
    fn node(&self, module: &[String]) -> String {
        module[..module.len().min(2)].join("::")
    }

    /// The node a path from the crate root lands in, if it names a module of this crate.
    fn resolve(&self, path: &[String]) -> Option<String> {
        let mut depth = 0;
        while depth < path.len().min(2) && self.is_module(&path[..=depth]) {
            depth += 1;
        }
        (depth > 0).then(|| path[..depth].join("::"))
    }
}

/// Each module path in `code` (comments and strings already blanked), made absolute, with its
/// byte offset.
pub fn paths(code: &str, module: &[String], tree: &ModuleTree<'_>) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let after_colons = i >= 2 && &bytes[i - 2..i] == b"::";
        if !starts_word || after_colons || !(bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            i += 1;
            continue;
        }
        let word_end = i + ident_len(&code[i..]);
        let word = &code[i..word_end];
        let rest = code[word_end..].trim_start();
        if !rest.starts_with("::") {
            i = word_end;
            continue;
        }
        // The module this path is relative to, and the tail after it.
        let (base, tail_at) = match word {
            "crate" => (Vec::new(), word_end),
            "super" | "self" => {
                let mut base = module.to_vec();
                let mut at = word_end;
                if word == "super" {
                    base.pop();
                    // `super::super::x`.
                    while let Some(next) = code[at..].trim_start().strip_prefix("::") {
                        let next = next.trim_start();
                        if !next.starts_with("super") || ident_len(next) != 5 {
                            break;
                        }
                        base.pop();
                        at = code.len() - next.len() + 5;
                    }
                }
                (base, at)
            }
            // A child module named without `self::`.
            child => {
                let mut candidate = module.to_vec();
                candidate.push(child.to_string());
                if !tree.is_module(&candidate) {
                    i = word_end;
                    continue;
                }
                (module.to_vec(), i)
            }
        };
        let mut tail = &code[tail_at..];
        if matches!(word, "crate" | "super" | "self") {
            tail = tail.trim_start().strip_prefix("::").unwrap_or(tail);
        }
        let (found, used) = path_tree(tail);
        for p in found {
            let mut full = base.clone();
            full.extend(p);
            out.push((i, full));
        }
        // Past the whole tree, so names inside `{...}` are not read again as relative paths.
        i = (code.len() - tail.len() + used).max(word_end);
    }
    out
}

fn ident_len(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// The paths of a use-tree or expression path (`a::b`, `{a, b::{c, d}}`, `a::{self, B}`) at the
/// start of `s`, and how many bytes it spans.
fn path_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut out = Vec::new();
    let used = parse_tree(s, Vec::new(), &mut out);
    (out, used)
}

/// Parses one tree at the start of `s`; returns how much it consumed.
fn parse_tree(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix;
    let mut at = 0;
    loop {
        let rest = &s[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if let Some(inner) = trimmed.strip_prefix('{') {
            at += 1;
            let mut inner_at = 0;
            loop {
                let r = &inner[inner_at..];
                let t = r.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                inner_at += r.len() - t.len();
                if t.is_empty() || t.starts_with('}') {
                    return at + inner_at + 1;
                }
                let used = parse_tree(t, segs.clone(), out);
                if used == 0 {
                    return at + inner_at; // Not a use-tree after all.
                }
                inner_at += used;
            }
        }
        let n = ident_len(trimmed);
        if n == 0 {
            out.push(segs);
            return at;
        }
        segs.push(trimmed[..n].to_string());
        at += n;
        let after = &s[at..];
        match after.trim_start().strip_prefix("::") {
            Some(next) => at = s.len() - next.len(),
            None => {
                out.push(segs);
                return at;
            }
        }
    }
}

/// `code` with comments, string and char literals blanked (newlines kept, for line numbers).
pub fn strip_comments_and_strings(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = code[i..].find('\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = code[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
            blank(&mut out, i, end);
            i = end;
        } else if !word_before
            && (b[i] == b'r' || b[i..].starts_with(b"br"))
            && raw_start(&b[i..]).is_some()
        {
            let (skip, hashes) = raw_start(&b[i..]).unwrap_or_default();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + skip;
            let end = code[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('a', '\n', '\u{1F600}'); otherwise a lifetime, left alone.
            let end = if b.get(i + 1) == Some(&b'\\') {
                code[i + 2..].find('\'').map(|n| i + 2 + n + 1)
            } else {
                let ch = code[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"`, `r#"`, `br##"`: the opening's length and the number of `#`.
fn raw_start(b: &[u8]) -> Option<(usize, usize)> {
    let start = if b.starts_with(b"br") { 2 } else { 1 };
    let hashes = b[start..].iter().take_while(|c| **c == b'#').count();
    (b.get(start + hashes) == Some(&b'"')).then_some((start + hashes + 1, hashes))
}
