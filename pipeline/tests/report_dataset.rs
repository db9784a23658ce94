//! `tracemill report` over an ingested dataset: a few samples ingested with host labels,
//! then hotspots and folded stacks over the bundles a `--where` selects against the sum of
//! the same reports over each bundle's own `decode`; an unselected bundle left out; a
//! bundle whose images went missing after ingest (a warning, the rest goes on); bad
//! filters (exit 2 with the reason).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{ok, run};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "truth" {
            continue; // not part of a collected bundle
        }
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// A copy of `sample` at `dir` with the label `host` (a label changes the bundle's id, so
/// the same sample under two hosts is two bundles).
fn bundle(sample: &str, dir: &Path, host: &str) {
    copy_dir(&common::samples_dir().join(sample), dir);
    let path = dir.join("bundle.toml");
    let mut t: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    t.entry("labels")
        .or_insert_with(|| toml::Value::Table(Default::default()))
        .as_table_mut()
        .unwrap()
        .insert("host".into(), toml::Value::String(host.into()));
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
}

/// `report hotspots --format csv --top 0` as (image, function) -> instructions.
fn hotspots(args: &[&str]) -> BTreeMap<(String, String), u64> {
    let mut a = vec!["report", "hotspots"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--format", "csv", "--top", "0"]);
    let o = ok(&a);
    let text = String::from_utf8(o.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (f, i, n) = (col("function"), col("image"), col("instructions"));
    let mut out = BTreeMap::new();
    for l in lines {
        // Function names of the samples have no comma (CSV quoting is not needed here).
        let v: Vec<&str> = l.split(',').collect();
        *out.entry((v[i].to_string(), v[f].to_string())).or_default() +=
            v[n].parse::<u64>().unwrap();
    }
    out
}

/// `report flamegraph --folded` as stack -> weight.
fn folded(args: &[&str], file: &Path) -> BTreeMap<String, u64> {
    let mut a = vec!["report", "flamegraph"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--folded", s(file)]);
    ok(&a);
    let mut out = BTreeMap::new();
    for l in std::fs::read_to_string(file).unwrap().lines() {
        let (stack, w) = l.rsplit_once(' ').unwrap();
        *out.entry(stack.to_string()).or_default() += w.parse::<u64>().unwrap();
    }
    out
}

fn add<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

struct Fleet {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dataset: PathBuf,
    /// bundle directory, host, its own decode output
    bundles: Vec<(PathBuf, &'static str, PathBuf)>,
}

/// recursion and strings on h1; recursion again (another bundle) and busybox-sort on h2;
/// ingested into one dataset partitioned by host, and each decoded on its own.
fn fleet() -> Fleet {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let mut bundles = Vec::new();
    for (sample, host) in [
        ("recursion", "h1"),
        ("strings", "h1"),
        ("recursion", "h2"),
        ("busybox-sort", "h2"),
    ] {
        let dir = root.join("fleet").join(host).join(sample);
        bundle(sample, &dir, host);
        let out = root.join("decoded").join(host).join(sample);
        ok(&["decode", s(&dir), "--out", s(&out), "-q", "-j", "1"]);
        bundles.push((dir, host, out));
    }
    let dataset = root.join("dataset");
    ok(&[
        "ingest",
        s(&root.join("fleet")),
        "--dataset",
        s(&dataset),
        "--partition-by",
        "host",
        "-j",
        "1",
        "-q",
    ]);
    Fleet {
        _tmp: tmp,
        root,
        dataset,
        bundles,
    }
}

#[test]
fn reports_over_a_dataset_add_up_the_selected_bundles() {
    let f = fleet();
    let ds = s(&f.dataset);
    for (filter, hosts) in [
        ("host = 'h1'", &["h1"][..]),
        ("host != 'h1'", &["h2"][..]),
        (
            "host IN ('h1', 'h2') AND sample = 'recursion'",
            &["h1", "h2"][..],
        ),
        ("host IN ('h2','h1')", &["h1", "h2"][..]),
    ] {
        let selected: Vec<_> = f
            .bundles
            .iter()
            .filter(|b| hosts.contains(&b.1))
            .filter(|b| !filter.contains("sample") || b.0.ends_with("recursion"))
            .collect();
        // Hotspots: exact instructions per function equal the sum over each bundle's own
        // decode (same functions from two bundles add up; others are left out).
        let mut want = BTreeMap::new();
        for b in &selected {
            add(&mut want, &hotspots(&[s(&b.2)]));
        }
        let got = hotspots(&[ds, "--where", filter]);
        assert_eq!(got, want, "{filter}: hotspots");
        // Stacks are rebuilt per bundle: the dataset's folded stacks are the sum of the
        // bundles' own, stack by stack.
        let mut want = BTreeMap::new();
        for (i, b) in selected.iter().enumerate() {
            add(
                &mut want,
                &folded(&[s(&b.2)], &f.root.join(format!("one{i}.folded"))),
            );
        }
        let got = folded(&[ds, "--where", filter], &f.root.join("all.folded"));
        assert_eq!(got, want, "{filter}: folded stacks");
    }
    // An unselected bundle is left out: busybox is only on h2.
    let h1 = hotspots(&[ds, "--where", "host = 'h1'"]);
    assert!(h1.keys().all(|(image, _)| image != "busybox"), "{h1:?}");
    assert!(h1.keys().any(|(image, _)| image == "strings"));
    // Without --where: every bundle.
    let all = hotspots(&[ds]);
    let mut want = BTreeMap::new();
    for b in &f.bundles {
        add(&mut want, &hotspots(&[s(&b.2)]));
    }
    assert_eq!(all, want, "all bundles");

    // The other reports run over the same selection.
    let out = f.root.join("reports");
    std::fs::create_dir_all(&out).unwrap();
    let o = ok(&[
        "report",
        "coverage",
        ds,
        "--where",
        "host = 'h1'",
        "--lcov",
        s(&out.join("cov.info")),
        "--drcov",
        s(&out.join("cov.drcov")),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("recursion") && text.contains("strings"),
        "{text}"
    );
    let lcov = std::fs::read_to_string(out.join("cov.info")).unwrap();
    assert!(lcov.contains("recursion.c") && lcov.contains("strings.c"));
    let o = ok(&[
        "report",
        "timeline",
        ds,
        "--where",
        "host = 'h1'",
        "--out",
        s(&out.join("t.json")),
    ]);
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("t.json")).unwrap()).unwrap();
    let pids: std::collections::BTreeSet<u64> = j["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(
        pids.len(),
        2,
        "one process per bundle: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    ok(&[
        "report",
        "html",
        ds,
        "--where",
        "host = 'h1'",
        "--out",
        s(&out.join("r.html")),
    ]);
    let page = std::fs::read_to_string(out.join("r.html")).unwrap();
    assert!(page.contains("2 selected of 4 in the catalog"), "summary");
    assert!(
        page.contains("<svg id=\"frames\""),
        "flame graph (inline SVG)"
    );
    // Every section is made of both bundles, in one pass over them: the page's
    // instruction count is the hotspots' total, its flame graph has as many, and a
    // bundle's warning is said once, not once per section.
    let total: u64 = h1.values().sum();
    let grouped = tracemill_reports::util::group(total);
    assert!(
        page.contains(&format!(
            "<div class=\"v\">{grouped}</div><div class=\"k\">instructions</div>"
        )),
        "instructions {grouped} in the summary"
    );
    assert!(
        page.contains(&format!("<p class=\"note\">{grouped} instructions in ")),
        "flame graph of {grouped} instructions"
    );
    let warns: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("<li class=\"warn\">"))
        .collect();
    let distinct: std::collections::BTreeSet<&&str> = warns.iter().collect();
    assert_eq!(
        warns.len(),
        distinct.len(),
        "warnings said once: {warns:#?}"
    );
}

#[test]
fn a_bundle_without_its_images_is_a_warning_and_the_rest_goes_on() {
    let f = fleet();
    let ds = s(&f.dataset);
    let filter = "host = 'h1'";
    let before = hotspots(&[ds, "--where", filter]);
    // strings' images go away after ingest.
    let strings = &f.bundles[1].0;
    std::fs::rename(strings.join("images"), strings.join("images.gone")).unwrap();
    let o = ok(&[
        "report", "hotspots", ds, "--where", filter, "--format", "csv", "--top", "0",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: bundle ") && err.contains("strings") && err.contains("+0xoffset"),
        "{err}"
    );
    let after = hotspots(&[ds, "--where", filter]);
    // recursion is symbolized as before; strings' code is image+0xoffset, same total.
    for ((image, func), n) in &before {
        if image == "recursion" {
            assert_eq!(after.get(&(image.clone(), func.clone())), Some(n), "{func}");
        }
    }
    assert!(after
        .keys()
        .any(|(image, func)| image == "strings" && func.starts_with("strings+0x")));
    assert_eq!(
        after.values().sum::<u64>(),
        before.values().sum::<u64>(),
        "total"
    );
    // The page over the same bundles says the missing images once: each bundle is opened
    // once for all the sections.
    let page = f.root.join("gone.html");
    ok(&["report", "html", ds, "--where", filter, "--out", s(&page)]);
    let page = std::fs::read_to_string(page).unwrap();
    let warns: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("<li class=\"warn\">") && l.contains("strings"))
        .collect();
    assert!(!warns.is_empty(), "the missing images are a warning");
    let distinct: std::collections::BTreeSet<&&str> = warns.iter().collect();
    assert_eq!(
        warns.len(),
        distinct.len(),
        "warnings said once: {warns:#?}"
    );
}

#[test]
fn bad_filters_are_usage_errors_with_the_reason() {
    let f = fleet();
    let ds = s(&f.dataset);
    for (filter, says, code) in [
        ("host = h1", "quote the value: host = 'h1'", 2),
        ("host = 'h1' OR host = 'h2'", "OR is not supported", 2),
        ("host IN ('h1'", "expected ',' or ')'", 2),
        ("hots = 'h1'", "no column \"hots\" in the catalog", 2),
        ("host = 'h9'", "no bundle selected", 1),
    ] {
        let o = run(&["report", "hotspots", ds, "--where", filter]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{filter}: {err}");
        assert!(err.contains(says), "{filter}: {err}");
        assert!(o.stdout.is_empty(), "{filter}");
    }
    // --where on a decode output directory, --bundle on a dataset.
    let o = run(&[
        "report",
        "hotspots",
        s(&f.bundles[0].2),
        "--where",
        "host = 'h1'",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not one"));
    let o = run(&["report", "hotspots", ds, "--bundle", s(&f.bundles[0].0)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("each bundle's own"));
}

#[test]
fn diff_of_two_selections_of_a_dataset() {
    let f = fleet();
    let ds = s(&f.dataset);
    let (h1, h2) = ("host = 'h1'", "host = 'h2'");
    let o = ok(&[
        "report",
        "diff",
        ds,
        ds,
        "--where-a",
        h1,
        "--where-b",
        h2,
        "--format",
        "csv",
        "--top",
        "0",
    ]);
    let text = String::from_utf8(o.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let mut got = BTreeMap::new();
    for l in lines {
        let v: Vec<&str> = l.split(',').collect();
        let change: i64 = v[col("change")].parse().unwrap();
        got.insert(
            (v[col("image")].to_string(), v[col("function")].to_string()),
            change,
        );
    }
    // Each side is what hotspots says of its selection.
    let (a, b) = (
        hotspots(&[ds, "--where", h1]),
        hotspots(&[ds, "--where", h2]),
    );
    let mut want = BTreeMap::new();
    for k in a.keys().chain(b.keys()) {
        let x = a.get(k).copied().unwrap_or(0) as i64;
        let y = b.get(k).copied().unwrap_or(0) as i64;
        want.insert(k.clone(), y - x);
    }
    assert_eq!(got, want, "changes per function");
    assert!(got.iter().any(|((i, _), &c)| i == "busybox" && c > 0));
    assert!(got.iter().any(|((i, _), &c)| i == "strings" && c < 0));

    // Coverage: strings (h1 only) is lost, busybox (h2 only) gained; recursion ran on
    // both hosts, the same sample: nothing of it changed.
    let o = ok(&[
        "report",
        "diff",
        ds,
        ds,
        "--where-a",
        h1,
        "--where-b",
        h2,
        "--format",
        "csv",
        "--coverage",
        "--top",
        "0",
    ]);
    let text = String::from_utf8(o.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let mut by_image: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in lines {
        // Function names and lines of the samples have no comma.
        let v: Vec<&str> = l.split(',').collect();
        let e = by_image.entry(v[col("image")].to_string()).or_default();
        e.0 += v[col("blocks_gained")].parse::<u64>().unwrap();
        e.1 += v[col("blocks_lost")].parse::<u64>().unwrap();
    }
    assert!(
        by_image["busybox"].0 > 0 && by_image["busybox"].1 == 0,
        "{by_image:?}"
    );
    assert!(
        by_image["strings"].1 > 0 && by_image["strings"].0 == 0,
        "{by_image:?}"
    );
    assert!(!by_image.contains_key("recursion"), "{by_image:?}");

    // --where holds for both sides: h1 against h1 and recursion is no change at all.
    let o = ok(&[
        "report",
        "diff",
        ds,
        ds,
        "--where",
        h1,
        "--where-b",
        "sample = 'recursion'",
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["blocks_gained"], 0, "{j}");
    assert!(
        j["blocks_lost"].as_u64().unwrap() > 0,
        "strings is not in B"
    );
    assert!(j["b"].as_str().unwrap().contains("AND"), "{}", j["b"]);
}

#[test]
fn pprof_of_a_selection_is_its_hotspots_in_go_tool_pprof() {
    let f = fleet();
    let ds = s(&f.dataset);
    let profile = f.root.join("h2.pb.gz");
    ok(&[
        "report",
        "pprof",
        ds,
        "--where",
        "host = 'h2'",
        "-o",
        s(&profile),
    ]);
    let o = match std::process::Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=1000000",
            "-nodefraction=0",
        ])
        .arg(&profile)
        .output()
    {
        Ok(o) => o,
        Err(_) => {
            return common::missing_tool(
                "go not found: install golang-go (apt-get install golang-go)",
            )
        }
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let mut flat: BTreeMap<String, u64> = BTreeMap::new();
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    for l in rows.skip(1) {
        let v: Vec<&str> = l.split_whitespace().collect();
        let n: u64 = v[0].parse().unwrap();
        if n > 0 {
            flat.insert(v[5..].join(" "), n);
        }
    }
    // The selection's hotspots, by function name. Code of no symbol (h2's stripped
    // busybox) is named differently: by the block (hotspots), by the call target it was
    // entered by (stacks); its total is the same.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for ((_, function), n) in hotspots(&[ds, "--where", "host = 'h2'"]) {
        *want.entry(function).or_default() += n;
    }
    let unnamed = |m: &mut BTreeMap<String, u64>| {
        let keys: Vec<String> = m
            .keys()
            .filter(|k| k.starts_with("busybox+0x"))
            .cloned()
            .collect();
        keys.iter().map(|k| m.remove(k).unwrap()).sum::<u64>()
    };
    let (a, b) = (unnamed(&mut flat), unnamed(&mut want));
    assert!(a > 0, "busybox is on h2");
    assert_eq!(a, b, "busybox's instructions");
    assert_eq!(flat, want);
}
