//! Error messages as the command line and the ingest catalog show them.

/// What failed, where and why, on one line ("what: why: why"), each cause once: errors
/// that print their source (thiserror's `"{path}: {source}"`) would otherwise say it
/// twice. A multi-line cause (a bundle.toml error showing its line) keeps its lines.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim_end();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}
