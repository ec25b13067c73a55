//! Checks a script's header against its Rust encoder.

/// An argument position and the name the header gives it.
type Named = (usize, String);

/// The names a script's header gives `ARGV[n]`: fixed positions, and
/// the name of a repeated tail `ARGV[n..]` with its first position.
pub fn argv_names(source: &str) -> (Vec<Named>, Option<Named>) {
    let mut fixed = Vec::new();
    let mut tail = None;
    for line in source.lines() {
        let Some(rest) = line.strip_prefix("-- ARGV[") else {
            continue;
        };
        let Some((position, after)) = rest.split_once("]: ") else {
            continue;
        };
        let name = after.split_whitespace().next().unwrap_or("").to_owned();
        if let Some(start) = position.strip_suffix("..") {
            tail = Some((start.parse().expect("tail position"), name));
        } else {
            fixed.push((position.parse().expect("position"), name));
        }
    }
    (fixed, tail)
}

/// Where a header says its arguments may stop: the position of the
/// first argument after a line `-- (the rest may be absent: ...)`.
pub fn optional_from(source: &str) -> Option<usize> {
    let mut lines = source
        .lines()
        .skip_while(|l| !l.starts_with("-- (the rest may be absent"));
    lines.next()?;
    lines.find_map(|l| {
        let rest = l.strip_prefix("-- ARGV[")?;
        rest.split([']', '.']).next()?.parse().ok()
    })
}

/// [`check`] of a session script, whose own arguments follow the
/// prelude's four.
pub fn check_session(script: &crate::lua::SessionScript, names: &[&str]) {
    check(&format!("{}.lua", script.name), script.body, 5, names);
}

/// Asserts that `names` (what the encoder pushed, from ARGV[`first`] on)
/// are what the header of `source` says. An encoder may stop where the
/// header says the rest may be absent ([`optional_from`]).
pub fn check(script: &str, source: &str, first: usize, names: &[&str]) {
    let (fixed, tail) = argv_names(source);
    let stop = optional_from(source).filter(|at| names.len() == at - first);
    for (position, name) in &fixed {
        if *position < first || stop.is_some_and(|at| *position >= at) {
            continue;
        }
        assert_eq!(
            names.get(position - first).copied(),
            Some(name.as_str()),
            "{script}: ARGV[{position}] is {name} in the header"
        );
    }
    let fixed_end = fixed.iter().map(|(p, _)| p + 1).max().unwrap_or(first);
    if stop.is_some() {
        return;
    }
    match tail {
        Some((start, name)) => {
            assert_eq!(
                start, fixed_end,
                "{script}: the tail follows the fixed arguments"
            );
            for (k, pushed) in names.iter().enumerate().skip(start - first) {
                assert_eq!(
                    *pushed,
                    name,
                    "{script}: ARGV[{}] is in the tail {name}",
                    k + first
                );
            }
        }
        None => assert_eq!(
            names.len(),
            fixed_end - first,
            "{script}: the encoder pushes what the header lists"
        ),
    }
}
