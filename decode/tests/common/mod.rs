//! What the two libipt suite tests (ptdump_suite.rs, ptxed_suite.rs) share: the list of
//! known failures and how a mismatch is told.

use std::collections::BTreeMap;
use std::path::Path;

/// `<name>` in the suite folder: `<expected output file> <reason>` a line, `#` comments.
/// Every entry must say why.
pub fn known_failures(suite: &Path, name: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(suite.join(name)).expect(name);
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (file, reason) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            assert!(
                !reason.trim().is_empty(),
                "known failure {file} gives no reason"
            );
            (file.to_string(), reason.trim().to_string())
        })
        .collect()
}

/// The first line where `want` and `have` differ, as a failure's reason; `None` if equal.
pub fn first_difference(want: &[String], have: &[String]) -> Option<String> {
    if want == have {
        return None;
    }
    let i = want.iter().zip(have).take_while(|(a, b)| a == b).count();
    Some(format!(
        "line {}: expected {:?}, got {:?}",
        i + 1,
        want.get(i).map(String::as_str).unwrap_or("<end>"),
        have.get(i).map(String::as_str).unwrap_or("<end>")
    ))
}
