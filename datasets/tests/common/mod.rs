//! Helpers shared by the integration tests.

/// A test cannot run because a tool it needs is not installed (`reason` says which and how
/// to get it). The test fails, so that `cargo test` shows it: in CI always, elsewhere
/// unless `TRACEMILL_SKIP_MISSING=1`, which skips it (prints the reason and returns).
/// (pipeline/tests/common includes this file.)
pub fn missing_tool(reason: &str) {
    let skip = std::env::var("TRACEMILL_SKIP_MISSING").is_ok_and(|v| v == "1");
    assert!(
        skip && std::env::var_os("CI").is_none(),
        "{reason}\n(see the README's test command; TRACEMILL_SKIP_MISSING=1 skips the tests \
         whose tools are missing, except in CI)"
    );
    eprintln!("SKIPPED: {reason}");
}
