//! `tracemill synth`: make bundles with ground truth from the hardware model.

use std::path::Path;

use anyhow::Result;
use tracemill_datasets::samples;

/// List the sample recipes.
pub fn list() -> String {
    let mut s = String::new();
    for r in samples::recipes() {
        s.push_str(&format!("{:<20} {}\n", r.name, r.about));
    }
    s
}

/// Generate samples `names` (or "all") under `out`.
pub fn samples(names: &[String], out: &Path) -> Result<()> {
    for dir in samples::synth_samples(names, out)? {
        let summary = std::fs::read_to_string(dir.join("truth/summary.json"))?;
        let v: serde_json::Value = serde_json::from_str(&summary)?;
        eprintln!(
            "wrote {}: {} bytes of trace, {} branches ({} lost)",
            dir.display(),
            v["bytes"],
            v["branches"],
            v["lost_rows"]
        );
    }
    Ok(())
}
