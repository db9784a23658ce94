//! The helpers every report's tests share: a sample decoded into a fresh directory, the
//! CLI's output as text, the bundle's first image symbolized as the reports do, CSV.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;
use tracemill_reports::symbols::{ImageSpec, ImageSymbols};

/// `report hotspots DIR` as CSV, every row: (header, rows).
pub fn hotspots_csv(dir: &Path) -> (Vec<String>, Vec<Vec<String>>, Output) {
    let o = ok(&[
        "report",
        "hotspots",
        s(dir),
        "--format",
        "csv",
        "--top",
        "0",
    ]);
    let (header, rows) = parse_csv(&stdout(&o));
    (header, rows, o)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Decode a committed sample into a fresh directory.
pub fn decoded(sample: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let bundle = samples_dir().join(sample);
    ok(&[
        "decode",
        bundle.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "-j",
        "1",
    ]);
    (tmp, out)
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The bundle's first image, symbolized as the reports do.
pub fn image(sample: &str) -> ImageSymbols {
    let dir = samples_dir().join(sample);
    let b = tracemill_input::bundle::Bundle::open(&dir, None, &[]).unwrap();
    let e = &b.manifest.images[0];
    ImageSymbols::load(ImageSpec {
        name: Path::new(&e.path)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned(),
        path: dir.join(&e.path),
        base: e.base,
        cr3: e.cr3,
        raw: false,
        symbols: None,
    })
    .unwrap()
}

/// Parse `report hotspots --format csv` into (image, function) -> instructions.
pub fn parse_csv(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    (header, rows)
}
