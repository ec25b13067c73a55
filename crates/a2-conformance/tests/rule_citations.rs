//! One rule, one name: every rule id of `docs/spec.md` is cited where it
//! is checked and where it is implemented, by its single id (never a
//! range such as "RN1–RN3", which hides the ids inside it from a search).
//!
//! - every rule of the stores' contract (§1 to §7) is named by a
//!   conformance case (its name or its doc);
//! - every store's sources cite each rule it implements: the memory store
//!   (`a2-core/src/memory`), SQLite (`a2-sqlite/src`), Redis
//!   (`a2-redis/src` and its Lua), with the exceptions below, each with its
//!   reason; input checks shared by every store live in
//!   `a2-core/src/validate` and are cited there;
//! - the Redis rules (§8) are cited by the Redis store and its tests, the
//!   runtime's (§9) by the runtime and its tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Rules a store does not implement, and why.
const NOT_IMPLEMENTED: &[(&str, &[&str], &str)] = &[
    (
        "memory",
        &["ST2", "ST3", "P5", "FK6"],
        "push wake-ups, subscriber connections, presence kept on a server and forks built across slots are Redis's",
    ),
    (
        "sqlite",
        &["P5", "PS2", "AC5", "FK6"],
        "SQLite has no push across processes: it yields no wake-ups (PS2), so it announces nothing (AC5); a fork is one transaction, not FK6's staged copy",
    ),
];

/// Input checks every store takes from `a2_core::validate`.
const SHARED_CHECKS: &[&str] = &["A12", "J1", "J2", "X1", "X2", "X3"];

/// Rules of a store that the suite cannot check on every store, and the
/// store's tests that check them instead.
const CHECKED_BY_STORE_TESTS: &[(&str, &str)] = &[
    ("P5", "crates/a2-redis/tests"),
    // How a store frees an expired session's storage: keys expiring on a
    // Redis server, rows deleted by SQLite's writes.
    ("EX5", "crates/a2-redis/tests"),
    // A fork staged across cluster slots and published in one step:
    // checked by killing a forking process and on a cluster.
    ("FK6", "crates/a2-redis/tests"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The rule ids of `docs/spec.md`, in order.
fn rule_ids() -> Vec<String> {
    let spec = std::fs::read_to_string(root().join("docs/spec.md")).expect("docs/spec.md");
    let mut ids = Vec::new();
    for line in spec.lines() {
        let Some(rest) = line.strip_prefix("- ") else {
            continue;
        };
        let rest = rest.trim_start_matches('*');
        let id: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            .collect();
        let letters = id.chars().take_while(char::is_ascii_uppercase).count();
        if (1..=3).contains(&letters) && id.len() > letters && !ids.contains(&id) {
            ids.push(id);
        }
    }
    assert!(
        ids.len() > 80,
        "found only {} rule ids in docs/spec.md",
        ids.len()
    );
    ids
}

/// The text of every `.rs` and `.lua` file under `dir`.
fn sources(dir: &str) -> String {
    files_of(dir, &["rs", "lua"])
}

/// The text of every file under `dir` with one of these extensions.
fn files_of(dir: &str, extensions: &[&str]) -> String {
    fn walk(path: &Path, extensions: &[&str], out: &mut String) {
        let entries = std::fs::read_dir(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.ends_with("docs/benchmarks/history") {
                // Earlier benchmark runs, kept as they were written.
                continue;
            } else if path.is_dir() {
                walk(&path, extensions, out);
            } else if path
                .extension()
                .is_some_and(|e| extensions.iter().any(|x| e == *x))
            {
                out.push_str(&std::fs::read_to_string(&path).expect("a source file"));
                out.push('\n');
            }
        }
    }
    let mut out = String::new();
    walk(&root().join(dir), extensions, &mut out);
    out
}

/// The rule ids `text` cites, as whole words.
fn cited(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The ids a conformance case cites: the words of its name (`a1_c6_…`)
/// and of its doc comment.
fn cited_by_cases() -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let dir = root().join("crates/a2-conformance/src/cases");
    for entry in std::fs::read_dir(&dir).expect("the cases") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).expect("a case file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = line
                .strip_prefix("pub async fn ")
                .and_then(|rest| rest.split('(').next())
            else {
                continue;
            };
            ids.extend(name.split('_').map(str::to_uppercase));
            let doc = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("///") || l.starts_with("#["));
            for line in doc {
                ids.extend(cited(line));
            }
        }
    }
    ids
}

fn is_store_rule(id: &str) -> bool {
    !id.starts_with("RD") && !id.starts_with("RT")
}

#[test]
fn every_rule_of_the_stores_is_named_by_a_conformance_case() {
    let cases = cited_by_cases();
    let mut missing = Vec::new();
    for id in rule_ids().into_iter().filter(|id| is_store_rule(id)) {
        if let Some((_, tests)) = CHECKED_BY_STORE_TESTS.iter().find(|(r, _)| *r == id) {
            if !cited(&sources(tests)).contains(&id) {
                missing.push(format!("{id} (in {tests})"));
            }
        } else if !cases.contains(&id) {
            missing.push(id);
        }
    }
    assert!(
        missing.is_empty(),
        "rules no conformance case names: {missing:?}"
    );
}

#[test]
fn every_store_cites_each_rule_it_implements() {
    // The feed loop (`a2_core::feed`) is every store's: the rules it
    // keeps count for each store that gives it a `LogTail`.
    let feed = sources("crates/a2-core/src/feed");
    let stores = [
        ("memory", sources("crates/a2-core/src/memory") + &feed),
        ("sqlite", sources("crates/a2-sqlite/src") + &feed),
        (
            "redis",
            sources("crates/a2-redis/src") + &sources("crates/a2-redis/lua") + &feed,
        ),
    ];
    let shared = cited(&sources("crates/a2-core/src/validate"));
    let mut missing = Vec::new();
    for id in rule_ids().into_iter().filter(|id| is_store_rule(id)) {
        if SHARED_CHECKS.contains(&id.as_str()) {
            if !shared.contains(&id) {
                missing.push(format!("{id} in a2-core/src/validate"));
            }
            continue;
        }
        for (store, text) in &stores {
            let exempt = NOT_IMPLEMENTED
                .iter()
                .any(|(s, ids, _)| s == store && ids.contains(&id.as_str()));
            if !exempt && !cited(text).contains(&id) {
                missing.push(format!("{id} in {store}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "rules a store implements but never cites: {missing:?}"
    );
}

#[test]
fn the_redis_and_runtime_rules_are_cited_by_their_code_and_tests() {
    let places = [
        ("RD", ["crates/a2-redis/src", "crates/a2-redis/tests"]),
        ("RT", ["crates/a2-runtime/src", "crates/a2-runtime/tests"]),
    ];
    let mut missing = Vec::new();
    for (prefix, dirs) in places {
        let texts: Vec<(&str, BTreeSet<String>)> =
            dirs.iter().map(|d| (*d, cited(&sources(d)))).collect();
        for id in rule_ids().into_iter().filter(|id| {
            id.strip_prefix(prefix)
                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        }) {
            for (dir, ids) in &texts {
                if !ids.contains(&id) {
                    missing.push(format!("{id} in {dir}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "rules not cited: {missing:?}");
}

#[test]
fn rules_are_cited_one_by_one_never_as_ranges() {
    let ids: BTreeSet<String> = rule_ids().into_iter().collect();
    let mut ranges = Vec::new();
    for dir in ["crates", "docs", "scripts"] {
        let text = files_of(dir, &["rs", "lua", "md", "sh"]);
        for line in text.lines() {
            let words: Vec<&str> = line.split([' ', '(', ')', ',', '`']).collect();
            for word in words {
                if let Some((a, b)) = word.split_once(['–', '-'])
                    && ids.contains(a)
                    && ids.contains(b)
                {
                    ranges.push(line.trim().to_owned());
                }
            }
        }
    }
    assert!(
        ranges.is_empty(),
        "rule ranges hide single ids: {ranges:#?}"
    );
}

#[test]
fn the_rule_map_of_docs_design_names_files_that_exist() {
    let design = std::fs::read_to_string(root().join("docs/design.md")).expect("docs/design.md");
    let (_, map) = design
        .split_once("## Where each rule lives")
        .expect("docs/design.md has the rule map");
    let map = map.split("\n## ").next().unwrap_or(map);
    let mut paths = 0;
    for path in map.split('`').filter(|p| p.starts_with("crates/")) {
        assert!(
            root().join(path).exists(),
            "docs/design.md names {path}, which does not exist"
        );
        paths += 1;
    }
    assert!(paths > 40, "the rule map names {paths} files");
}
