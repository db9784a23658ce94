//! `tracemill dump` on Intel PT traces: `--ptdump` gives libipt ptdump's listing for
//! libipt's own test cases (each ptdump option the suite uses, through the command
//! line), a bundle's `format = "pt"` and `[pt]` facts reach the listing, and a trace of
//! one format given as the other is refused with a message that names the right one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tracemill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .output()
        .expect("tracemill runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/libipt-ptt")
}

fn case_file(case: &str, suffix: &str) -> PathBuf {
    suite().join(case).join(format!("{case}{suffix}"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 paths in tests")
}

/// Lines as `diff -b` compares them.
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let t = l.trim_end();
            let mut out = String::new();
            let mut space = false;
            for ch in t.chars() {
                if ch.is_ascii_whitespace() {
                    space = true;
                } else {
                    if space {
                        out.push(' ');
                    }
                    space = false;
                    out.push(ch);
                }
            }
            out
        })
        .collect()
}

/// (case, expected file, ptdump option words) for every expected ptdump output.
fn suite_checks() -> Vec<(String, String, Vec<String>)> {
    let text = std::fs::read_to_string(suite().join("index.json")).unwrap();
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    let words = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let mut out = Vec::new();
    for c in index["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let opts = words(&c["ptdump"]);
        let cpus = words(&c["cpus"]);
        if cpus.is_empty() {
            out.push((name.clone(), format!("{name}-ptdump.exp"), opts.clone()));
        }
        for cpu in cpus {
            let mut args = vec!["--cpu".to_string(), cpu.clone()];
            args.extend(opts.iter().cloned());
            let exp = format!("{name}-ptdump-cpu_{}.exp", cpu.replace('/', "_"));
            out.push((name.clone(), exp, args));
        }
    }
    out
}

/// For each option word the suite's ptdump runs use, the first case that uses it (and
/// the cases with problem lines): each goes through the command line as
/// `tracemill dump <case>.pt --ptdump <words>` and must match libipt's expected output.
#[test]
fn ptdump_listing_through_the_cli_matches_libipt() {
    let mut seen = BTreeSet::new();
    let mut ran = 0;
    for (case, exp, args) in suite_checks() {
        let expected = std::fs::read_to_string(suite().join(&case).join(&exp)).unwrap();
        let new_word = args
            .iter()
            .filter(|w| w.starts_with("--"))
            .any(|w| seen.insert(w.clone()));
        if !new_word && !expected.contains('[') && !case.starts_with("ptdump-") {
            continue;
        }
        let trace = case_file(&case, ".pt");
        let mut argv = vec!["dump", s(&trace), "--ptdump"];
        argv.extend(args.iter().map(String::as_str));
        let o = tracemill(&argv);
        assert!(o.status.success(), "{argv:?}: {}", stderr(&o));
        assert_eq!(
            normalized(&stdout(&o)),
            normalized(&expected),
            "{exp}: tracemill {argv:?}"
        );
        ran += 1;
    }
    // Every option word of the suite was exercised.
    for w in [
        "--cpu",
        "--time",
        "--tcal",
        "--time-delta",
        "--no-tcal",
        "--no-wall-clock",
        "--mtc-freq",
        "--nom-freq",
        "--cpuid-0x15.eax",
        "--cpuid-0x15.ebx",
        "--no-offset",
        "--raw",
        "--lastip",
        "--exec-mode",
        "--no-sync",
        "--no-cyc",
        "--keep-tcal-on-ovf",
    ] {
        assert!(seen.contains(w), "{w} not in the suite's options: {seen:?}");
    }
    assert!(ran >= 25, "{ran} cases ran");
}

/// `format = "pt"` and `[pt]` in bundle.toml: the timing facts come from the manifest
/// (IA32_RTIT_CTL's MTCFreq, [pt]'s ratios), the display options from the command line.
#[test]
fn a_pt_bundle_brings_its_facts() {
    let case = "tsc-tma-cbr-mtc-cyc_calibrate";
    // ptdump --time --time-delta --nom-freq 4 --mtc-freq 4 --cpuid-0x15.eax 1 --cpuid-0x15.ebx 4
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(case_file(case, ".pt"), dir.path().join("trace.pt")).unwrap();
    std::fs::write(
        dir.path().join("bundle.toml"),
        "format = \"pt\"\ntrace = \"trace.pt\"\nrtit_ctl = \"0x10000\"\n\
         [pt]\nnom_freq = 4\ntsc_ctc_ratio_n = 4\ntsc_ctc_ratio_d = 1\n",
    )
    .unwrap();
    let o = tracemill(&["dump", s(dir.path()), "--ptdump", "--time", "--time-delta"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read_to_string(case_file(case, "-ptdump.exp")).unwrap();
    assert_eq!(normalized(&stdout(&o)), normalized(&expected));
    // Without the ratios the MTCs cannot be timed: the listing differs, and says why.
    std::fs::write(
        dir.path().join("bundle.toml"),
        "format = \"pt\"\ntrace = \"trace.pt\"\nrtit_ctl = \"0x10000\"\n[pt]\nnom_freq = 4\n",
    )
    .unwrap();
    let o = tracemill(&["dump", s(dir.path()), "--ptdump", "--time", "--time-delta"]);
    assert!(stdout(&o).contains("error updating time: bad configuration"));
    // The command line wins over the manifest.
    let o = tracemill(&[
        "dump",
        s(dir.path()),
        "--ptdump",
        "--time",
        "--time-delta",
        "--cpuid-0x15.eax",
        "1",
        "--cpuid-0x15.ebx",
        "4",
    ]);
    assert_eq!(normalized(&stdout(&o)), normalized(&expected));
    // A bad [pt] is named.
    std::fs::write(
        dir.path().join("bundle.toml"),
        "format = \"pt\"\ntrace = \"trace.pt\"\nrtit_ctl = 0\n[pt]\ncpu = \"six\"\n",
    )
    .unwrap();
    let o = tracemill(&["dump", s(dir.path())]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bundle.toml: [pt] cpu"),
        "{}",
        stderr(&o)
    );
}

/// Without --ptdump: tracemill's own listing (PSB-bounded, IPs decompressed) and stats.
#[test]
fn the_pt_listing_and_stats() {
    let trace = case_file("ptdump-last-ip", ".pt");
    let o = tracemill(&["dump", s(&trace)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The IPs --lastip shows in ptdump's listing.
    let want = [
        ("fup", "0xa00ccccddddeeee"),
        ("tip", "0xa00ffffeeeeffff"),
        ("tip.pge", "0xa00ffffeeeedddd"),
        ("fup", "0xffffffffddddeeee"),
        ("tip.pgd", "0xffffffffeeeeffff"),
    ];
    let got: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f.iter().position(|w| w.starts_with("tip") || *w == "fup")?;
            Some((f[i].to_string(), f.get(i + 1)?.to_string()))
        })
        .collect();
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want, "{out}");
    assert!(out.starts_with("0000000000000000  02 82 02 82"), "{out}");

    let o = tracemill(&["dump", s(&case_file("dump-all-packets", ".pt")), "--stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let count = |name: &str| -> u64 {
        out.lines()
            .find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(' ')?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or_else(|| panic!("{name} in {out}"))
    };
    // ptdump --no-sync lists a psbend before the PSB; ours starts at the PSB.
    assert_eq!(count("before PSB"), 2);
    assert_eq!(count("tip"), 7);
    assert_eq!(count("cfe"), 4);
    assert_eq!(count("trig"), 3);
    assert_eq!(count("errors"), 0);
}

/// A trace of one format given as the other is refused, naming the right
/// `--trace-format` (`--format`, dump's old spelling, still works); without one the
/// format is decided once, as for every command (`tracemill_input::source`).
#[test]
fn the_wrong_format_is_named() {
    let pt = case_file("dump-all-packets", ".pt");
    let dir = tempfile::tempdir().unwrap();
    // Without the .pt extension, a bare trace's first PSB says it is Intel PT: no --ctl
    // is asked for.
    let bin = dir.path().join("trace.bin");
    std::fs::copy(&pt, &bin).unwrap();
    for args in [
        &["dump", s(&bin)][..],
        &["dump", s(&bin), "--ctl", "0x2e0d"],
    ] {
        let o = tracemill(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    for args in [
        &["dump", s(&pt), "--format", "rtit"][..],
        &["dump", s(&bin), "--trace-format", "rtit", "--ctl", "0x2e0d"],
    ] {
        let o = tracemill(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains("this looks like an Intel PT trace")
                && err.contains("use --trace-format pt"),
            "{args:?}: {err}"
        );
    }
    let o = tracemill(&["dump", s(&bin), "--format", "pt"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/samples");
    let rtit = samples.join("recursion");
    // A bundle's format is its bundle.toml's.
    let o = tracemill(&["dump", s(&rtit), "--trace-format", "pt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--trace-format pt given, but its bundle.toml says format = \"rtit\""),
        "{}",
        stderr(&o)
    );
    let o = tracemill(&[
        "dump",
        s(&rtit.join("trace.rtit")),
        "--format",
        "pt",
        "--ptdump",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("this looks like an RTIT trace") && err.contains("use --trace-format rtit"),
        "{err}"
    );
    // ptdump's options are for Intel PT.
    let o = tracemill(&["dump", s(&rtit), "--ptdump"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("use --trace-format pt"),
        "{}",
        stderr(&o)
    );
    // Display options need --ptdump.
    let o = tracemill(&["dump", s(&pt), "--lastip"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
