//! The modules of each crate import each other without a circle.
//!
//! Crates already form floors (no crate imports a higher one: Cargo
//! refuses a cycle between crates). Inside a crate nothing stops two
//! modules from importing each other, and once two do, neither can be read,
//! tested or moved alone. This test reads the `use` declarations of every
//! library source file under `crates/*/src` (unit-test modules aside),
//! resolves each path to the module it names, and fails on every circle
//! between modules: a strongly connected group of two or more, where a
//! module's imports of its own ancestors and descendants (`use super::*`,
//! a parent re-exporting its child's items) are part of its shape, not a
//! circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path inside its crate (`[]` for the crate root).
type Module = Vec<String>;

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a source file defines, from its place under `src`.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_owned()),
    }
    parts
}

/// Whether the file is a unit-test module or test support: their imports
/// reach anywhere in their crate by design.
fn is_test_code(module: &Module) -> bool {
    module
        .iter()
        .any(|part| part == "tests" || part == "testing")
}

/// `text` without comments and without its unit-test module (from a
/// `#[cfg(test)]` followed by `mod`, which by habit ends a file).
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The paths `code` imports: its `use` declarations, each as one string
/// without the keyword, the visibility or the final `;`, and every path
/// it names in place from `crate::`.
fn imports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = find_use(rest) {
        let after = &rest[at + "use ".len()..];
        let end = after.find(';').unwrap_or(after.len());
        found.push(after[..end].split_whitespace().collect::<String>());
        rest = &after[end..];
    }
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::").map(|at| from + at) {
        from = at + "crate::".len();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let end = code[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(code.len(), |n| at + n);
        found.push(code[at..end].trim_end_matches(':').to_owned());
    }
    found
}

/// The position of the next `use ` that starts a declaration (at the start
/// of a line, after optional visibility).
fn find_use(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let mut body = trimmed;
        if let Some(rest) = body.strip_prefix("pub") {
            body = rest.trim_start();
            if body.starts_with('(') {
                body = body
                    .split_once(')')
                    .map_or("", |(_, rest)| rest)
                    .trim_start();
            }
        }
        if body.starts_with("use ") {
            return Some(offset + indent + (trimmed.len() - body.len()));
        }
        offset += line.len();
    }
    None
}

/// Expands a use tree (`crate::{a::b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn split_top(list: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in list.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&list[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&list[start..]);
        parts.into_iter().filter(|p| !p.is_empty()).collect()
    }
    let tree = tree.trim_start_matches("::");
    match tree.find('{') {
        None => {
            let path = tree.split(" as ").next().unwrap_or(tree);
            let path = path.split("as").next().unwrap_or(path);
            vec![path.split("::").map(str::to_owned).collect()]
        }
        Some(open) => {
            let prefix: Vec<String> = tree[..open]
                .trim_end_matches("::")
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut paths = Vec::new();
            for part in split_top(inner) {
                for mut tail in expand(part) {
                    let mut path = prefix.clone();
                    tail.retain(|s| s != "self");
                    path.append(&mut tail);
                    paths.push(path);
                }
            }
            paths
        }
    }
}

/// The module of `modules` that a path used in `from` names: the longest
/// known module its leading segments spell; `None` for other crates.
fn resolve(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut base: Module;
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            base = Vec::new();
            segments.next();
        }
        Some("super") => {
            base = from.clone();
            while segments.peek().is_some_and(|s| *s == "super") {
                base.pop();
                segments.next();
            }
        }
        Some("self") => {
            base = from.clone();
            segments.next();
        }
        Some(first) => {
            // A child module of this one named without `self::`.
            let mut child = from.clone();
            child.push(first.to_owned());
            if !modules.contains(&child) {
                return None;
            }
            base = from.clone();
        }
        None => return None,
    }
    for segment in segments {
        let mut next = base.clone();
        next.push(segment.clone());
        if modules.contains(&next) {
            base = next;
        } else {
            break;
        }
    }
    Some(base)
}

/// The strongly connected groups of two or more modules (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        groups: Vec<Vec<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a Module) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    group.push(member.clone());
                    if member == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.groups
}

/// The circles between the modules of the crate whose sources are `src`.
fn crate_circles(src: &Path) -> Vec<Vec<Module>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let parsed: Vec<(Module, String)> = files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("a readable source file");
            (module_of(src, file), text)
        })
        .filter(|(module, _)| !is_test_code(module))
        .collect();
    let modules: BTreeSet<Module> = parsed.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut lifted = Vec::new();
    for (module, text) in &parsed {
        let targets = edges.entry(module.clone()).or_default();
        for declaration in imports(&code_of(text)) {
            for path in expand(&declaration) {
                let Some(target) = resolve(module, &path, &modules) else {
                    continue;
                };
                let related = target.starts_with(module) || module.starts_with(&target);
                if related {
                    continue;
                }
                // Lifted to the two children of their closest common
                // ancestor: a module that uses `a::b::c` depends on `a`,
                // as seen from its own sibling of `a`.
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(x, y)| x == y)
                    .count();
                targets.insert(target.clone());
                lifted.push((module[..=common].to_vec(), target[..=common].to_vec()));
            }
        }
    }
    // Edges between subtrees, beside those between files.
    for (from, to) in lifted {
        edges.entry(from).or_default().insert(to);
    }
    circles(&edges)
}

fn show(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn no_import_circle_between_modules_of_any_crate() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut checked = 0;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the crates folder")
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for group in crate_circles(&src) {
            let members: Vec<String> = group.iter().map(show).collect();
            found.push(format!("{name}: {}", members.join(" <-> ")));
        }
    }
    assert!(checked >= 9, "only {checked} crates found under {crates:?}");
    assert!(
        found.is_empty(),
        "{} import circle(s) between modules:\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

/// The reader of `use` lines finds what a circle is made of: a test that
/// fails when the reader stops seeing imports could never fail otherwise.
#[test]
fn the_circle_check_finds_a_circle_and_ignores_parents_and_children() {
    let dir = std::env::temp_dir().join(format!("a2-layering-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\npub use a::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "mod inner;\npub use inner::Thing;\nuse crate::{b::{Other, more}};\n",
    )
    .unwrap();
    std::fs::write(src.join("a/inner.rs"), "use super::*;\npub struct Thing;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "// use crate::nothing;\npub(crate) use crate::a::inner::Thing as T;\n",
    )
    .unwrap();
    // Paths named in place count; a unit-test module's do not.
    std::fs::write(src.join("c.rs"), "pub fn f() {\n    crate::d::g();\n}\n").unwrap();
    std::fs::write(
        src.join("d.rs"),
        "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::c::f;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("e.rs"), "fn x() -> u8 {\n    crate::f::Y\n}\n").unwrap();
    std::fs::write(src.join("f.rs"), "pub const Y: u8 = crate::e::x as u8;\n").unwrap();
    let mut found = crate_circles(&src);
    std::fs::remove_dir_all(&dir).ok();
    found.sort();
    let module = |name: &str| vec![name.to_owned()];
    assert_eq!(
        found,
        vec![
            vec![module("a"), module("b")],
            vec![module("e"), module("f")]
        ],
        "a <-> b (b names a::inner, which is inside a) and e <-> f (named in place)"
    );
}
