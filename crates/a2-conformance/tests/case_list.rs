//! Every `pub async fn` case in `src/cases/` is in the one case list of
//! `for_each_case!`, so no case is silently left out of the generated tests.

use std::collections::BTreeSet;

macro_rules! names {
    ($($module:ident :: $case:ident),* $(,)?) => {
        vec![$(concat!(stringify!($module), "::", stringify!($case))),*]
    };
}

#[test]
fn every_case_is_listed_once() {
    let listed: Vec<&str> = a2_conformance::for_each_case!(names);
    let unique: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(unique.len(), listed.len(), "a case is listed twice");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cases");
    let mut defined = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                let name = rest.split('(').next().unwrap();
                defined.insert(format!("{module}::{name}"));
            }
        }
    }
    let listed: BTreeSet<String> = unique.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        defined, listed,
        "cases defined in src/cases and listed in for_each_case! differ"
    );
}
