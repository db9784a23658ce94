//! Inputs as they are collected (issue #10 part 7): the linear trace of a committed sample
//! laid out as ToPA dumps (fits, wrapped over two tables, stopped by a STOP region) and as
//! trace-hub captures (unaligned start, partial lines, lines out of order), written as
//! bundles and decoded: each must give exactly the tables of the linear form of the same
//! bytes, and its problems must be clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use tracemill::run::{self, Tables};
use tracemill_datasets::collected::{write_topa, write_trace_hub, HubPlan, TopaPlan};
use tracemill_decode::chunk::Decoded;
use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::Manifest;

/// A bundle in `dir` with `sample`'s manifest (images by absolute path) and `file` as its
/// trace, set up by `form`.
fn write(dir: &Path, sample: &Path, file: &[u8], form: impl FnOnce(&mut Manifest)) -> PathBuf {
    let mut m = Manifest::load(sample).unwrap();
    for im in &mut m.images {
        im.path = sample.join(&im.path).display().to_string();
    }
    m.trace = "trace.bin".into();
    form(&mut m);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("trace.bin"), file).unwrap();
    std::fs::write(dir.join("bundle.toml"), m.to_toml()).unwrap();
    dir.to_path_buf()
}

fn same(name: &str, want: &Decoded, got: &Decoded) {
    assert!(
        want.rows.len() > 10,
        "{name}: only {} rows",
        want.rows.len()
    );
    assert_eq!(want.rows, got.rows, "{name}: branches");
    assert_eq!(want.events, got.events, "{name}: events");
    assert_eq!(want.timing, got.timing, "{name}: timing");
    assert_eq!(want.timing_rows, got.timing_rows, "{name}: timing rows");
}

#[test]
fn topa_and_trace_hub_decode_like_the_linear_trace() {
    let tmp = tempfile::tempdir().unwrap();
    for sample in ["recursion", "kernel-processes", "synthetic"] {
        let src = samples_dir().join(sample);
        let linear = std::fs::read(src.join("trace.rtit")).unwrap();
        let lin = Bundle::open(&src, None, &[]).unwrap();
        let want = decode(&lin, u64::MAX);
        let n = linear.len();

        // ToPA that holds it all: two tables, regions dumped out of order.
        let mut sizes: Vec<u8> = Vec::new();
        while sizes.iter().map(|&c| 4096usize << c).sum::<usize>() <= n + 4096 {
            sizes.push(sizes.len() as u8 % 3);
        }
        let plan = TopaPlan {
            sizes,
            first_table: 3,
            circular: true,
            int_every: 3,
            seed: 1,
        };
        let laid = write_topa(&linear, &plan);
        assert!(!laid.form.wrapped);
        let d = write(
            &tmp.path().join(format!("{sample}-topa")),
            &src,
            &laid.file,
            |m| m.topa = Some(laid.form.clone()),
        );
        let b = Bundle::open(&d, None, &[]).unwrap();
        assert_eq!(&b.trace[..], &linear[..], "{sample}: ToPA stream");
        assert!(b.starts_at_enable);
        same(&format!("{sample} ToPA"), &want, &decode(&b, u64::MAX));
        // And through the threaded pipeline, in chunks.
        let report = run::decode(
            &b,
            &run::Options {
                jobs: 2,
                chunk_bytes: Some(4096),
                tables: Tables::ALL,
                ..run::Options::default()
            },
        )
        .unwrap();
        assert_eq!(report.rows, want.rows.len() as u64, "{sample}");

        // Trace hub: unaligned start, early flushes, lines out of order.
        for (size, start) in [(4096, 0x2C5), (1 << 20, 0)] {
            let laid = write_trace_hub(
                &linear,
                &HubPlan {
                    size,
                    start_offset: start,
                    flush_every: 1024,
                    reorder: 0.3,
                    seed: 2,
                },
            );
            let d = write(
                &tmp.path().join(format!("{sample}-hub{size}")),
                &src,
                &laid.file,
                |m| m.trace_hub = Some(laid.form.clone()),
            );
            let b = Bundle::open(&d, None, &[]).unwrap();
            assert_eq!(&b.trace[..], &linear[..], "{sample}: trace-hub stream");
            assert!(b.trace_problems.is_empty(), "{:?}", b.trace_problems);
            same(&format!("{sample} trace hub"), &want, &decode(&b, u64::MAX));
        }

        // Wrapped ToPA: the newest bytes, decoded as the same bytes dumped from a ring.
        let cap = n / 3 / 4096 * 4096;
        let plan = TopaPlan {
            sizes: vec![0; cap / 4096],
            first_table: 2,
            circular: true,
            int_every: 0,
            seed: 3,
        };
        let laid = write_topa(&linear, &plan);
        assert!(laid.form.wrapped);
        let d = write(
            &tmp.path().join(format!("{sample}-wrapped")),
            &src,
            &laid.file,
            |m| m.topa = Some(laid.form.clone()),
        );
        let b = Bundle::open(&d, None, &[]).unwrap();
        assert_eq!(&b.trace[..], &linear[n - cap..], "{sample}: wrapped stream");
        assert!(!b.starts_at_enable);
        let ring = write(
            &tmp.path().join(format!("{sample}-ring")),
            &src,
            &linear[n - cap..],
            |m| m.ring_offset = Some(0),
        );
        let ring = Bundle::open(&ring, None, &[]).unwrap();
        same(
            &format!("{sample} wrapped ToPA"),
            &decode(&ring, u64::MAX),
            &decode(&b, u64::MAX),
        );

        // STOP on the last region: the trace up to where it filled, as a linear prefix.
        let plan = TopaPlan {
            sizes: vec![0, 1, 0],
            first_table: 0,
            circular: false,
            int_every: 1,
            seed: 4,
        };
        let laid = write_topa(&linear, &plan);
        assert!(laid.form.stopped);
        let d = write(
            &tmp.path().join(format!("{sample}-stop")),
            &src,
            &laid.file,
            |m| m.topa = Some(laid.form.clone()),
        );
        let b = Bundle::open(&d, None, &[]).unwrap();
        let prefix = write(
            &tmp.path().join(format!("{sample}-prefix")),
            &src,
            &linear[..16 << 10],
            |_| {},
        );
        let prefix = Bundle::open(&prefix, None, &[]).unwrap();
        same(
            &format!("{sample} stopped ToPA"),
            &decode(&prefix, u64::MAX),
            &decode(&b, u64::MAX),
        );
    }
}

#[test]
fn collected_forms_report_problems_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let src = samples_dir().join("recursion");
    let linear = std::fs::read(src.join("trace.rtit")).unwrap();
    let plan = TopaPlan {
        sizes: vec![0, 0, 0],
        first_table: 0,
        circular: true,
        int_every: 0,
        seed: 5,
    };
    let laid = write_topa(&linear, &plan);
    let open_err = |name: &str, file: &[u8], f: &dyn Fn(&mut Manifest)| -> String {
        let d = write(&tmp.path().join(name), &src, file, f);
        match Bundle::open(&d, None, &[]) {
            Ok(_) => panic!("{name}: opened"),
            Err(e) => format!("{e:#}"),
        }
    };
    // Overlapping regions, named with their file offsets.
    let e = open_err("overlap", &laid.file, &|m| {
        let mut t = laid.form.clone();
        t.regions[2].file_offset = t.regions[1].file_offset + 0x800;
        m.topa = Some(t);
    });
    assert!(
        e.contains("overlap in the trace file") && e.contains("trace.bin"),
        "{e}"
    );
    // A truncated dump.
    let e = open_err("short", &laid.file[..laid.file.len() - 1], &|m| {
        m.topa = Some(laid.form.clone())
    });
    assert!(e.contains("needs file bytes"), "{e}");
    // Two forms at once.
    let e = open_err("two", &laid.file, &|m| {
        m.topa = Some(laid.form.clone());
        m.ring_offset = Some(3);
    });
    assert!(e.contains("give one"), "{e}");
    // A trace-hub line outside the range.
    let hub = write_trace_hub(
        &linear[..4096],
        &HubPlan {
            size: 1024,
            start_offset: 0,
            flush_every: 0,
            reorder: 0.0,
            seed: 6,
        },
    );
    let mut f = hub.file.clone();
    f[80..88].copy_from_slice(&(hub.form.base + 4096).to_le_bytes());
    let e = open_err("outside", &f, &|m| m.trace_hub = Some(hub.form.clone()));
    assert!(
        e.contains("record 1 (file offset 0x50)") && e.contains("outside"),
        "{e}"
    );

    // A lost line ends the stream there, with a warning in the decode report. (In a
    // capture that wraps, the line's next iteration would take its place: 2.3.2 allows
    // lines to arrive a whole iteration late, so the two cannot be told apart.)
    let hub = write_trace_hub(
        &linear[..4096],
        &HubPlan {
            size: 8192,
            start_offset: 0,
            flush_every: 0,
            reorder: 0.0,
            seed: 6,
        },
    );
    let mut f = hub.file.clone();
    f.drain(5 * 80..6 * 80);
    let d = write(&tmp.path().join("lost"), &src, &f, |m| {
        m.trace_hub = Some(hub.form.clone())
    });
    let b = Bundle::open(&d, None, &[]).unwrap();
    assert_eq!(&b.trace[..], &linear[..5 * 64]);
    assert!(
        b.trace_problems.iter().any(|w| w.contains("never arrived")),
        "{:?}",
        b.trace_problems
    );
    let report = run::decode(&b, &run::Options::default()).unwrap();
    assert!(
        report.warnings.iter().any(|w| w.contains("never arrived")),
        "{:?}",
        report.warnings
    );
}
