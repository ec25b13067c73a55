//! The table of error codes in `docs/spec.md` (§1) and the code agree:
//! every code is in the table once, and `is_retryable` answers as its
//! "retry" column says.

use a2_core::ErrorCode;

const SPEC: &str = include_str!("../../../docs/spec.md");

/// `(code, retry)` of each row of the table: `| \`Code\` | when | yes |`.
fn table() -> Vec<(String, bool)> {
    SPEC.lines()
        .map(str::trim)
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // ["", code, when, retry, ""]
            if cells.len() != 5 {
                return None;
            }
            let code = cells[1].strip_prefix('`')?.strip_suffix('`')?;
            let retry = match cells[3] {
                "yes" => true,
                "no" => false,
                _ => return None,
            };
            Some((code.to_owned(), retry))
        })
        .collect()
}

#[test]
fn every_error_code_is_in_the_spec_table_with_its_retry_answer() {
    let table = table();
    let codes: Vec<(String, bool)> = ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str().to_owned(), c.is_retryable()))
        .collect();
    assert_eq!(
        table, codes,
        "docs/spec.md §1's table and ErrorCode disagree"
    );
}

#[test]
fn a_code_serializes_as_the_name_the_table_gives_it() {
    for code in ErrorCode::ALL {
        let json = serde_json::to_value(code).unwrap();
        assert_eq!(json, code.as_str());
    }
}
