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
use std::path::Path;

#[path = "module_cycles/source.rs"]
mod source;

use source::{module_graph, paths, strip_comments_and_strings, ModuleTree};

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
