//! `tracemill synth`: make bundles with ground truth from the hardware model.

use std::path::Path;

use anyhow::{Context, Result};
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

/// The samples a fleet is made of: small ones, quick to ingest, with different code.
pub const FLEET_PROGRAMS: [&str; 2] = ["recursion", "callbacks"];
/// The fleet's hosts and nights.
pub const FLEET_HOSTS: [&str; 3] = ["h1", "h2", "h3"];
pub const FLEET_DATES: [&str; 2] = ["2026-11-23", "2026-11-24"];

/// A small labelled fleet for trying `ingest` and `report --where`: each of
/// [`FLEET_PROGRAMS`] (bundles of `samples`) as collected on every host of [`FLEET_HOSTS`]
/// on every night of [`FLEET_DATES`], at `out/<date>/<host>/<program>/`, with the labels
/// `host`, `date` and `program`. The same trace on two hosts is two bundles (their
/// bundle.toml differ). Files are hard-linked from the samples where the file system
/// allows, else copied; the samples' ground truth is left out.
pub fn fleet(samples: &Path, out: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut made = Vec::new();
    for program in FLEET_PROGRAMS {
        let src = samples.join(program);
        let toml_path = src.join("bundle.toml");
        let text = std::fs::read_to_string(&toml_path).with_context(|| {
            format!(
                "{}: cannot read the {program} sample (run from the repository root, or give \
                 --samples DIR)",
                toml_path.display()
            )
        })?;
        let manifest: toml::Table = text
            .parse()
            .with_context(|| format!("{}: not a bundle.toml", toml_path.display()))?;
        for date in FLEET_DATES {
            for host in FLEET_HOSTS {
                let dir = out.join(date).join(host).join(program);
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("{}: cannot create", dir.display()))?;
                let mut m = manifest.clone();
                let labels = m
                    .entry("labels")
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(l) = labels {
                    for (k, v) in [("host", host), ("date", date), ("program", program)] {
                        l.insert(k.into(), toml::Value::String(v.into()));
                    }
                }
                let text = toml::to_string(&m).context("writing bundle.toml")?;
                std::fs::write(dir.join("bundle.toml"), text)
                    .with_context(|| format!("{}: cannot write bundle.toml", dir.display()))?;
                link_tree(&src, &dir, &["bundle.toml", "truth"])?;
                made.push(dir);
            }
        }
    }
    Ok(made)
}

/// Hard-link (or copy) the files under `from` into `to`, except the top-level `skip`.
fn link_tree(from: &Path, to: &Path, skip: &[&str]) -> Result<()> {
    for e in std::fs::read_dir(from).with_context(|| format!("{}: cannot list", from.display()))? {
        let e = e?;
        let name = e.file_name();
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let (src, dst) = (e.path(), to.join(&name));
        if e.file_type()?.is_dir() {
            std::fs::create_dir_all(&dst)?;
            link_tree(&src, &dst, &[])?;
        } else {
            let _ = std::fs::remove_file(&dst);
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst)
                    .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
            }
        }
    }
    Ok(())
}
