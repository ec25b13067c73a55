//! Glob patterns over stream paths, as subscriptions use them.

/// Glob matching of stream paths: `*` is one segment, `**` any number
/// (none too), anything else a literal segment.
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    fn parts(p: &str) -> Vec<&str> {
        p.split('/').filter(|s| !s.is_empty()).collect()
    }
    fn go(pattern: &[&str], path: &[&str]) -> bool {
        match pattern.split_first() {
            None => path.is_empty(),
            Some((&"**", rest)) => (0..=path.len()).any(|skip| go(rest, &path[skip..])),
            Some((&"*", rest)) => !path.is_empty() && go(rest, &path[1..]),
            Some((literal, rest)) => {
                path.first().is_some_and(|seg| seg == literal) && go(rest, &path[1..])
            }
        }
    }
    go(&parts(pattern), &parts(path))
}

/// The literal part of a pattern before its first wildcard segment: where
/// a listing of the streams it may match starts.
pub(crate) fn literal_prefix(pattern: &str) -> String {
    let mut prefix = String::new();
    for seg in pattern.split('/').filter(|s| !s.is_empty()) {
        if seg == "*" || seg == "**" {
            break;
        }
        prefix.push_str(seg);
        prefix.push('/');
    }
    prefix.pop();
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_segments() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(!glob_match("events/*", "events"));
        assert!(glob_match("events/**", "events"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("**/b", "a/x/b"));
        assert!(!glob_match("a/*/c", "a/b/d"));
        assert_eq!(literal_prefix("events/*"), "events");
        assert_eq!(literal_prefix("a/b/**/c"), "a/b");
        assert_eq!(literal_prefix("exact/name"), "exact/name");
    }
}
