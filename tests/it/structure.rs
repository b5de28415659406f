//! The code's shape, as ARCHITECTURE.md draws it: data flows one way, so no two top-level
//! modules of `src/` may reach each other, directly or round a longer loop. The edges are the
//! `crate::` paths of each module's non-test code; a cycle fails with every edge that closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Where one module names another: `file:line`.
type Edges = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` that is not a test: `#[cfg(test)]` items and everything after a
/// `#[cfg(test)] mod tests` are cut, and comments dropped.
fn non_test_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_next_item = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            skip_next_item = true;
            continue;
        }
        if skip_next_item {
            // A test module runs to the end of the file; a lone test item to its own line.
            if trimmed.starts_with("mod ") && trimmed.ends_with('{') {
                break;
            }
            skip_next_item = false;
            continue;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push((n + 1, code.to_string()));
    }
    out
}

/// The top-level modules named by `crate::` paths in `code`, `use crate::{a, b::c}` included.
fn named_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: `a`, `b::c` -> a, b (nested groups are inside a).
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.push(item);
        } else {
            out.push(rest.to_string());
        }
    }
    out.into_iter()
        .map(|s| {
            s.trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

fn module_edges() -> (BTreeSet<String>, Edges) {
    let src = Path::new(SRC);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |path: &Path| -> String {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| top(f))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut edges = Edges::new();
    for file in &files {
        let from = top(file);
        let name = file.file_name().unwrap().to_string_lossy();
        if !modules.contains(&from) || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in non_test_lines(&text) {
            for to in named_modules(&line) {
                if to != from && modules.contains(&to) {
                    let at = format!("{}:{n}", file.strip_prefix(src).unwrap().display());
                    edges
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_default()
                        .push(at);
                }
            }
        }
    }
    (modules, edges)
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(modules: &BTreeSet<String>, edges: &Edges) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let targets: Vec<&'a str> = s
            .edges
            .get(v)
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for w in targets {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for m in modules {
        if !state.index.contains_key(m.as_str()) {
            visit(&mut state, m);
        }
    }
    state.found
}

#[test]
fn no_cycle_between_top_level_modules() {
    let (modules, edges) = module_edges();
    assert!(
        ["api", "gate", "backend", "fence", "s3api", "server"]
            .iter()
            .all(|m| modules.contains(*m)),
        "the scan found the modules {modules:?}"
    );
    // The scan sees real edges: the surfaces reach the gate, the gate its stores.
    assert!(edges["api"].contains_key("gate") && edges["gate"].contains_key("fence"));
    let found = cycles(&modules, &edges);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("\ncycle among {component:?}:"));
        for from in component {
            for (to, at) in &edges[from] {
                if component.contains(to) {
                    report.push_str(&format!("\n  {from} -> {to}: {}", at.join(", ")));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "top-level modules reach each other:{report}"
    );
}

#[test]
fn the_scan_finds_grouped_paths_and_skips_tests_and_comments() {
    assert_eq!(
        named_modules("use crate::{gate::{A, B}, token, backend::C};"),
        ["gate", "token", "backend"]
    );
    assert_eq!(named_modules("let x = crate::fence::get();"), ["fence"]);
    let text = "use crate::a;\n// crate::b\nfn f() {} // crate::c\n#[cfg(test)]\nuse crate::d;\nuse crate::e;\n#[cfg(test)]\nmod tests {\n    use crate::f;\n}\n";
    let kept: Vec<String> = non_test_lines(text)
        .into_iter()
        .flat_map(|(_, l)| named_modules(&l))
        .collect();
    assert_eq!(kept, ["a", "e"]);
    let mut modules = BTreeSet::new();
    let mut edges = Edges::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        modules.insert(from.to_string());
        modules.insert(to.to_string());
        edges
            .entry(from.into())
            .or_default()
            .insert(to.into(), vec![]);
    }
    assert_eq!(cycles(&modules, &edges), [["a", "b", "c"]]);
}
