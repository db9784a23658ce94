//! The facts a decode records in its tables' metadata so that a report finds the bundle
//! and checks its images (`tracemill-reports` reads them back: `input.rs`).

use std::path::Path;

use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::ImageKind;
use tracemill_reports::input::{ImageMeta, META_BUNDLE, META_IMAGES};

/// Metadata pairs every table of a decode carries besides the standard ones: the bundle's
/// labels (`label.<key>`), the bundle directory (`tracemill.bundle`, absolute) and the
/// images as decoded with their build-ids (`tracemill.images`, JSON).
pub fn decode_meta(bundle: &Bundle) -> Vec<(String, String)> {
    let mut kv: Vec<(String, String)> = bundle
        .manifest
        .labels
        .iter()
        .map(|(k, v)| (format!("label.{k}"), v.clone()))
        .collect();
    if !bundle.in_memory && bundle.dir.join("bundle.toml").is_file() {
        let dir = std::path::absolute(&bundle.dir).unwrap_or_else(|_| bundle.dir.clone());
        kv.push((META_BUNDLE.into(), dir.display().to_string()));
    }
    // A perf.data's image loaded once per address space (processes with other code at the
    // same addresses) is one file for the reports.
    let mut listed = std::collections::BTreeSet::new();
    let images: Vec<ImageMeta> = bundle
        .images
        .iter()
        .filter(|im| listed.insert((&im.path, im.entry.base, im.entry.cr3)))
        .map(|im| ImageMeta {
            name: Path::new(&im.entry.path).file_name().map_or_else(
                || im.entry.path.clone(),
                |n| n.to_string_lossy().into_owned(),
            ),
            path: std::path::absolute(&im.path)
                .unwrap_or_else(|_| im.path.clone())
                .display()
                .to_string(),
            base: im.entry.base,
            cr3: im.entry.cr3,
            raw: im.entry.kind == ImageKind::Raw,
            build_id: match im.entry.kind {
                ImageKind::Elf => tracemill_reports::symbols::build_id(&im.bytes),
                ImageKind::Raw => None,
            },
            symbols: im.entry.symbols.as_ref().map(|p| {
                let p = bundle.dir.join(p);
                std::path::absolute(&p).unwrap_or(p).display().to_string()
            }),
        })
        .collect();
    if !images.is_empty() {
        if let Ok(j) = serde_json::to_string(&images) {
            kv.push((META_IMAGES.into(), j));
        }
    }
    kv
}
