//! The kubelet crate's modules form no cycle: a module that another module depends on must not
//! depend back on it, directly or through others. Cycles make modules impossible to understand,
//! test or move one at a time (issue 13 broke images <-> sync, object_cache <-> objects,
//! podutil <-> source, logs <-> runtime, prober -> node -> status -> prober and the sibling
//! circles inside runtime/ and prober/); this test keeps them from coming back.
//!
//! The graph is read from the source text, not from the compiler:
//! - Nodes: every top-level module of `src/` (`foo.rs`, `foo/mod.rs`) and, for a module with a
//!   directory, each of its submodules (`foo/bar.rs`, `foo/bar/mod.rs`) as `foo::bar`. Deeper files
//!   count as their `foo::bar` ancestor; test files (`tests.rs`, `x_tests.rs`) count as the module
//!   they test.
//! - Edges: `crate::a::b` paths (grouped `use crate::{a, b::c}` too), `super::` paths resolved from
//!   the file's module, and `self::x` / `x::` paths naming a child module. Comments and string
//!   literals are ignored. Paths to names that are not module files (re-exports from other crates,
//!   items of `lib.rs`) are not edges.
//! - Checked: the top-level graph (each node collapsed to its top-level module) and, inside each
//!   module directory, the graph of sibling submodules. A parent's own file (`foo/mod.rs`) is left
//!   out of the sibling graph: a parent re-exporting its children while they use the types it
//!   defines is the ordinary Rust layout, not a circle between peers.
//!
//! `cargo test -p rkubelet-core --test module_cycles -- --nocapture` prints the graph's size.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Where an edge was first seen, to tell a reader which line to change.
type Evidence = (String, usize);
type Graph = BTreeMap<String, BTreeMap<String, Evidence>>;

#[test]
fn kubelet_modules_have_no_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    let edges: usize = graph.values().map(BTreeMap::len).sum();
    assert!(
        graph.len() > 40 && edges > 100,
        "the graph looks empty ({} modules, {edges} edges): did the layout change?",
        graph.len()
    );
    let mut problems = Vec::new();
    for (label, g) in [("top-level modules".to_string(), top_level(&graph))]
        .into_iter()
        .chain(siblings(&graph))
    {
        for cycle in cycles(&g) {
            problems.push(format!("{label}: {}", describe(&cycle, &g)));
        }
    }
    assert!(
        problems.is_empty(),
        "module cycles in crates/kubelet/src:\n  {}",
        problems.join("\n  ")
    );
    println!(
        "module graph is acyclic: {} modules, {edges} edges ({} top-level modules, {} edges between them)",
        graph.len(),
        top_level(&graph).len(),
        top_level(&graph).values().map(BTreeMap::len).sum::<usize>()
    );
}

/// `a -> b (file:line) -> a (file:line)`.
fn describe(cycle: &[String], g: &Graph) -> String {
    let mut out = cycle[0].clone();
    for w in cycle.windows(2) {
        let (file, line) = &g[&w[0]][&w[1]];
        out.push_str(&format!(" -> {} ({file}:{line})", w[1]));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading the source.
// ---------------------------------------------------------------------------------------------

/// The fine graph: nodes at depth one or two, edges with where they were first seen.
fn module_graph(src: &Path) -> Graph {
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
struct ModuleTree<'a> {
    src: &'a Path,
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
fn paths(code: &str, module: &[String], tree: &ModuleTree<'_>) -> Vec<(usize, Vec<String>)> {
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
fn strip_comments_and_strings(code: &str) -> String {
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

// ---------------------------------------------------------------------------------------------
// The graphs checked, and the cycle finder.
// ---------------------------------------------------------------------------------------------

fn top(node: &str) -> &str {
    node.split("::").next().unwrap_or(node)
}

/// Every node collapsed to its top-level module.
fn top_level(g: &Graph) -> Graph {
    let mut out = Graph::new();
    for (from, tos) in g {
        let entry = out.entry(top(from).to_string()).or_default();
        for (to, ev) in tos {
            if top(to) != top(from) {
                entry
                    .entry(top(to).to_string())
                    .or_insert_with(|| ev.clone());
            }
        }
    }
    out
}

/// One graph per module directory: its submodules and the edges among them.
fn siblings(g: &Graph) -> Vec<(String, Graph)> {
    let mut per_dir: BTreeMap<String, Graph> = BTreeMap::new();
    for (from, tos) in g.iter().filter(|(n, _)| n.contains("::")) {
        let dir = per_dir.entry(top(from).to_string()).or_default();
        let entry = dir.entry(from.clone()).or_default();
        for (to, ev) in tos {
            if to.contains("::") && top(to) == top(from) {
                entry.insert(to.clone(), ev.clone());
            }
        }
    }
    per_dir
        .into_iter()
        .map(|(dir, graph)| (format!("submodules of {dir}"), graph))
        .collect()
}

/// One cycle (first node repeated at the end) per strongly connected component with more than
/// one node (Tarjan's algorithm), so each knot is reported once with a concrete way round it.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flat_map(|t| t.keys())).collect();
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        components: Vec::new(),
    };
    for n in nodes {
        if !t.index.contains_key(n.as_str()) {
            t.visit(n);
        }
    }
    t.components
        .into_iter()
        .filter(|c| c.len() > 1)
        .filter_map(|c| cycle_through(g, &c))
        .collect()
}

struct Tarjan<'a> {
    g: &'a Graph,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    on_stack: BTreeSet<&'a str>,
    next: usize,
    components: Vec<BTreeSet<String>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, v: &'a str) {
        self.index.insert(v, self.next);
        self.low.insert(v, self.next);
        self.next += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        for w in self.g.get(v).into_iter().flat_map(|t| t.keys()) {
            let w = w.as_str();
            if !self.index.contains_key(w) {
                self.visit(w);
                let lw = self.low[w];
                let lv = self.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if self.on_stack.contains(w) {
                let iw = self.index[w];
                let lv = self.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// The shortest way from the component's first node back to itself (breadth first).
fn cycle_through(g: &Graph, component: &BTreeSet<String>) -> Option<Vec<String>> {
    let start = component.iter().next()?;
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(v) = queue.pop_front() {
        for w in g.get(v).into_iter().flat_map(|t| t.keys()) {
            if !component.contains(w) {
                continue;
            }
            if w == start {
                // Back from `v` to the start, then round again to it.
                let mut path = vec![v.to_string()];
                let mut at = v;
                while at != start {
                    at = came_from[at];
                    path.push(at.to_string());
                }
                path.reverse();
                path.push(start.clone());
                return Some(path);
            }
            if !came_from.contains_key(w.as_str()) && w != start {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The finder and the reader on small tables.
// ---------------------------------------------------------------------------------------------

fn table(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string())
            .or_default()
            .insert(b.to_string(), ("f.rs".into(), 1));
        g.entry(b.to_string()).or_default();
    }
    g
}

/// Edges, and the cycles expected from them.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a [&'a str]]);

#[test]
fn cycle_finder_on_tables() {
    let cases: &[Case] = &[
        (&[], &[]),
        (&[("a", "b"), ("b", "c"), ("a", "c")], &[]),
        (&[("a", "b"), ("b", "a")], &[&["a", "b", "a"]]),
        (
            &[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")],
            &[&["a", "b", "c", "a"]],
        ),
        // Two separate knots are both reported; the shortest way round is chosen.
        (
            &[
                ("a", "b"),
                ("b", "a"),
                ("x", "y"),
                ("y", "z"),
                ("z", "x"),
                ("y", "x"),
            ],
            &[&["a", "b", "a"], &["x", "y", "x"]],
        ),
    ];
    for (edges, want) in cases {
        let mut got = cycles(&table(edges));
        got.sort();
        let want: Vec<Vec<String>> = want
            .iter()
            .map(|c| c.iter().map(|s| s.to_string()).collect())
            .collect();
        assert_eq!(got, want, "edges {edges:?}");
    }
}

#[test]
fn collapsing_and_siblings() {
    let g = table(&[
        ("runtime::env", "runtime::container"),
        ("runtime::container", "runtime::env"),
        ("runtime::container", "runtime"),
        ("runtime", "runtime::container"),
        ("status::compute", "runtime::actions"),
        ("runtime::actions", "status"),
    ]);
    assert_eq!(
        cycles(&top_level(&g)),
        vec![vec![
            "runtime".to_string(),
            "status".into(),
            "runtime".into()
        ]]
    );
    let sib = siblings(&g);
    let runtime = &sib
        .iter()
        .find(|(l, _)| l == "submodules of runtime")
        .expect("runtime")
        .1;
    // The parent's own file is not a sibling: only env <-> container is a cycle.
    assert_eq!(
        cycles(runtime),
        vec![vec![
            "runtime::container".to_string(),
            "runtime::env".into(),
            "runtime::container".into()
        ]]
    );
}

#[test]
fn paths_are_read_from_code_only() {
    let code = strip_comments_and_strings(
        "use crate::{a::{self, B}, b::c};\n// crate::x::y\nlet s = \"crate::z\"; let c = '\"'; crate::d::e(r#\"crate::q\"#);\nfn f<'a>(x: &'a str) {}\n",
    );
    let got: Vec<Vec<String>> = paths_of(&code);
    let want: Vec<Vec<String>> = [vec!["a", "B"], vec!["b", "c"], vec!["d", "e"]]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(got, want);
}

/// `crate::` paths of a snippet, without module files to check against.
fn paths_of(code: &str) -> Vec<Vec<String>> {
    let tree = ModuleTree {
        src: Path::new("/nonexistent"),
    };
    let mut got: Vec<Vec<String>> = paths(code, &["m".to_string()], &tree)
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| p.last().is_none_or(|s| s != "self"))
        .collect();
    got.sort();
    got
}
