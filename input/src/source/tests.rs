//! The rules of [`Source::open`]: the order the format is decided in, the mismatches and
//! options it refuses (named per face), and the checks it makes before a decode.

use super::*;

use tracemill_decode::{pt, rtit};

/// A trace of `psb`'s format: a PSB, then PAD-like filler.
fn trace(psb: &[u8]) -> Vec<u8> {
    let mut v = psb.to_vec();
    v.resize(4096, 0);
    v
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn refused(r: Result<Source>) -> InputError {
    match r {
        Ok(s) => panic!("{} opened", s.name),
        Err(e) => e
            .downcast::<InputError>()
            .unwrap_or_else(|e| panic!("not an InputError: {e:#}")),
    }
}

fn open(path: &Path, o: &Overrides) -> Result<Source> {
    Source::open(Given::Path(path), o)
}

#[test]
fn format_is_decided_by_extension_then_first_psb_then_rtit() {
    let d = tempfile::tempdir().unwrap();
    let pt = trace(&pt::packet::PSB_BYTES);
    let rtit = trace(&rtit::packet::PSB_BYTES);
    assert_eq!(bare_format(&file(d.path(), "a.pt", &rtit)), TraceFormat::Pt);
    assert_eq!(
        bare_format(&file(d.path(), "a.rtit", &pt)),
        TraceFormat::Rtit
    );
    assert_eq!(bare_format(&file(d.path(), "a.bin", &pt)), TraceFormat::Pt);
    assert_eq!(
        bare_format(&file(d.path(), "b.bin", &rtit)),
        TraceFormat::Rtit
    );
    assert_eq!(
        bare_format(&file(d.path(), "c.bin", &[0; 64])),
        TraceFormat::Rtit
    );
}

#[test]
fn bare_intel_pt_needs_no_ctl_and_takes_the_pt_facts() {
    let d = tempfile::tempdir().unwrap();
    let p = file(d.path(), "x.bin", &trace(&pt::packet::PSB_BYTES));
    let o = Overrides {
        pt: PtOverrides {
            cpu: Some(Some("6/85".into())),
            mtc_freq: Some(3),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = open(&p, &o).unwrap();
    assert_eq!((s.kind, s.format), (Kind::Bare, TraceFormat::Pt));
    let Opened::Bundle(b) = &s.opened else {
        panic!("one trace")
    };
    let cfg = b.pt_config().unwrap();
    assert_eq!(cfg.mtc_freq, 3);
    assert!(cfg.cpu.is_some());
    // Nothing loaded: the decode's own warning, said before it.
    assert!(!s.has_code);
    assert_eq!(
        s.warnings.last().map(String::as_str),
        Some("no code image loaded: no branch can be followed")
    );
}

#[test]
fn a_trace_of_the_other_format_is_refused_naming_the_option_of_each_face() {
    let d = tempfile::tempdir().unwrap();
    let p = file(d.path(), "x.pt", &trace(&rtit::packet::PSB_BYTES));
    let e = refused(open(&p, &Overrides::default()));
    assert!(matches!(
        e.kind,
        ErrorKind::Mismatch {
            found: TraceFormat::Rtit,
            expected: TraceFormat::Pt,
            psb: 0
        }
    ));
    assert!(
        e.message(Face::Cli).ends_with("use --trace-format rtit"),
        "{e}"
    );
    assert!(
        e.message(Face::Python).ends_with("use format=\"rtit\""),
        "{}",
        e.message(Face::Python)
    );
    // An Intel PT trace read as RTIT is refused for its format, not asked for --ctl.
    let p = file(d.path(), "y.rtit", &trace(&pt::packet::PSB_BYTES));
    let e = refused(open(&p, &Overrides::default()));
    assert!(matches!(e.kind, ErrorKind::Mismatch { .. }), "{e}");
}

#[test]
fn a_bare_rtit_trace_needs_ctl_named_per_face() {
    let d = tempfile::tempdir().unwrap();
    let p = file(d.path(), "x.bin", &trace(&rtit::packet::PSB_BYTES));
    let e = refused(open(&p, &Overrides::default()));
    assert_eq!(e.kind, ErrorKind::NeedsCtl);
    assert!(e.message(Face::Cli).contains("needs --ctl ("));
    assert!(e.message(Face::Python).contains("needs ctl= ("));
    let o = Overrides {
        ctl: Some(0x2001),
        ..Default::default()
    };
    let s = open(&p, &o).unwrap();
    assert_eq!((s.kind, s.format), (Kind::Bare, TraceFormat::Rtit));
    // Bytes: the same rule, with the description as the other way.
    let bytes = Given::Bytes {
        bytes: Bytes::Owned(trace(&rtit::packet::PSB_BYTES)),
        name: "<memory>".into(),
        dir: d.path().to_path_buf(),
    };
    let e = refused(Source::open(bytes, &Overrides::default()));
    assert_eq!(e.kind, ErrorKind::NeedsCtlForBytes);
    assert!(
        e.message(Face::Python).contains("ctl= (") && e.message(Face::Python).contains("config= (")
    );
}

#[test]
fn bytes_take_the_format_of_their_first_psb() {
    let d = tempfile::tempdir().unwrap();
    let bytes = Given::Bytes {
        bytes: Bytes::Owned(trace(&pt::packet::PSB_BYTES)),
        name: "<memory>".into(),
        dir: d.path().to_path_buf(),
    };
    let s = Source::open(bytes, &Overrides::default()).unwrap();
    assert_eq!((s.kind, s.format), (Kind::Memory, TraceFormat::Pt));
}

#[test]
fn options_that_do_not_apply_are_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let rtit_file = file(d.path(), "x.rtit", &trace(&rtit::packet::PSB_BYTES));
    // Intel PT facts for an RTIT trace.
    let o = Overrides {
        ctl: Some(1),
        pt: PtOverrides {
            nom_freq: Some(24),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = refused(open(&rtit_file, &o));
    assert!(
        matches!(&e.kind, ErrorKind::PtOnly { given, bundle: false } if given == &[Opt::NomFreq])
    );
    assert!(
        e.message(Face::Cli)
            .contains("--nom-freq is for Intel PT traces"),
        "{e}"
    );
    assert!(e
        .message(Face::Python)
        .contains("nom_freq= is for Intel PT traces"));
    // perf.data options for a trace that is not one.
    let o = Overrides {
        ctl: Some(1),
        lookup: Lookup {
            symfs: Some(d.path().into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = refused(open(&rtit_file, &o));
    assert_eq!(e.kind, ErrorKind::PerfOnly(vec![Opt::Symfs]));
    assert!(e
        .message(Face::Python)
        .starts_with(&format!("{}: symfs= is for perf.data", rtit_file.display())));
    // The kernel's files are named by the option given (both were once `--vmlinux`).
    let o = Overrides {
        ctl: Some(1),
        lookup: Lookup {
            kcore: vec![d.path().join("kcore")],
            ..Default::default()
        },
        ..Default::default()
    };
    let e = refused(open(&rtit_file, &o));
    assert_eq!(e.kind, ErrorKind::PerfOnly(vec![Opt::Kcore]));
    assert!(
        e.message(Face::Cli).contains(": --kcore is for perf.data"),
        "{e}"
    );
    // What a perf.data says itself, given: refused before the file is read.
    let perf = file(d.path(), "perf.data", b"PERFILE2 and not much else");
    let o = Overrides {
        ctl: Some(1),
        images: vec![crate::bundle::parse_image_arg("/bin/true").unwrap()],
        ..Default::default()
    };
    let e = refused(open(&perf, &o));
    assert_eq!(e.kind, ErrorKind::NotForPerf(vec![Opt::Ctl, Opt::Image]));
    assert!(
        e.message(Face::Cli)
            .contains("--ctl and --image do not apply"),
        "{e}"
    );
    let o = Overrides {
        format: Some(TraceFormat::Rtit),
        ..Default::default()
    };
    assert_eq!(refused(open(&perf, &o)).kind, ErrorKind::PerfIsPt);
    // A description is for bytes only.
    let o = Overrides {
        config: Some(Manifest::new(1)),
        ..Default::default()
    };
    assert_eq!(refused(open(&rtit_file, &o)).kind, ErrorKind::ConfigForPath);
}

#[test]
fn a_format_given_must_be_the_bundles() {
    let d = tempfile::tempdir().unwrap();
    file(d.path(), "trace.rtit", &trace(&rtit::packet::PSB_BYTES));
    file(
        d.path(),
        "bundle.toml",
        Manifest::new(0x2001).to_toml().as_bytes(),
    );
    let o = Overrides {
        format: Some(TraceFormat::Pt),
        ..Default::default()
    };
    let e = refused(open(d.path(), &o));
    assert_eq!(
        e.kind,
        ErrorKind::FormatOfBundle {
            said: TraceFormat::Rtit,
            given: TraceFormat::Pt
        }
    );
    // The bundle's own format, given, is no mismatch.
    let o = Overrides {
        format: Some(TraceFormat::Rtit),
        ..Default::default()
    };
    let s = open(d.path(), &o).unwrap();
    assert_eq!((s.kind, s.format), (Kind::Bundle, TraceFormat::Rtit));
}

#[test]
fn reserved_rtit_ctl_bits_are_a_warning_of_the_checks() {
    let d = tempfile::tempdir().unwrap();
    let p = file(d.path(), "x.rtit", &trace(&rtit::packet::PSB_BYTES));
    let o = Overrides {
        ctl: Some(0x2001 | 1 << 40),
        ..Default::default()
    };
    let s = open(&p, &o).unwrap();
    assert!(
        s.warnings[0].starts_with("rtit_ctl 0x10000002001 sets reserved bits"),
        "{:?}",
        s.warnings
    );
    // Intel PT has no such check: IA32_RTIT_CTL's other bits are perf's config.
    let p = file(d.path(), "x.pt", &trace(&pt::packet::PSB_BYTES));
    let s = open(&p, &o).unwrap();
    assert!(
        s.warnings.iter().all(|w| !w.contains("reserved")),
        "{:?}",
        s.warnings
    );
}
