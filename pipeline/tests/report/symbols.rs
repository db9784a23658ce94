//! Symbols: the reports' against nm and addr2line, and a raw image's from its symbol file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::setup::*;

#[test]
fn symbols_agree_with_nm_and_addr2line() {
    let im = image("recursion");
    let path = samples_dir().join("recursion/images/recursion");
    let nm = match Command::new("nm").arg(&path).output() {
        Ok(o) => o,
        Err(_) => return missing_tool("nm not found: install binutils"),
    };
    // Every defined text symbol that nm lists is named by the symbolizer (an alias may be
    // chosen, but at the same address).
    let mut checked = 0;
    for l in String::from_utf8_lossy(&nm.stdout).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 3 || !matches!(f[1], "T" | "t") {
            continue;
        }
        let addr = u64::from_str_radix(f[0], 16).unwrap();
        let i = im
            .function_index(addr)
            .unwrap_or_else(|| panic!("{} at {addr:#x} not found", f[2]));
        assert_eq!(im.functions()[i].start, addr, "{}", f[2]);
        checked += 1;
    }
    assert!(checked > 500, "only {checked} text symbols in nm's output");
    // The program's functions have lines; addr2line agrees on them.
    let fib = im
        .functions()
        .iter()
        .find(|f| f.name == "fib")
        .expect("fib");
    let mut addrs: Vec<u64> = (fib.start..fib.end).step_by(7).collect();
    addrs.truncate(12);
    let hex: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let o = match Command::new("addr2line")
        .arg("-e")
        .arg(&path)
        .args(&hex)
        .output()
    {
        Ok(o) => o,
        Err(_) => return missing_tool("addr2line not found: install binutils"),
    };
    let theirs: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split(" (").next().unwrap().to_string())
        .collect();
    let mut agreed = 0;
    for (a, t) in addrs.iter().zip(&theirs) {
        // addr2line prints the innermost location, as `line` does.
        let ours = im.line(*a).map(|l| format!("{}:{}", l.file, l.line));
        if let Some(o) = &ours {
            if t.ends_with(o.trim_start_matches("./")) || o.ends_with(t) {
                agreed += 1;
                continue;
            }
        }
        panic!("{a:#x}: ours {ours:?}, addr2line {t}");
    }
    assert!(agreed > 0);
    assert!(
        theirs[0].contains("datasets/programs/recursion.c"),
        "{theirs:?}"
    );
}

/// A raw image with a symbol file names its functions as the ELF would: the recursion
/// sample's executable segment dumped as raw bytes at its address, with `nm`'s output of
/// the ELF as the symbol file, gives the same instructions per function as the ELF.
#[test]
fn raw_image_with_a_symbol_file_has_the_elfs_functions() {
    use object::{Object, ObjectSegment};
    let sample = samples_dir().join("recursion");
    let elf_path = sample.join("images/recursion");
    let nm = match Command::new("nm").arg(&elf_path).output() {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => panic!("nm failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => return missing_tool("nm not found: install binutils"),
    };
    let elf = std::fs::read(&elf_path).unwrap();
    let file = object::File::parse(&*elf).unwrap();
    let exec: Vec<_> = file
        .segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0))
        .collect();
    assert_eq!(exec.len(), 1, "one executable segment in the static sample");
    let (addr, code) = (exec[0].address(), exec[0].data().unwrap());

    // The same trace, the code as a raw image plus a symbol file.
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    std::fs::create_dir_all(raw.join("images")).unwrap();
    std::fs::copy(sample.join("trace.rtit"), raw.join("trace.rtit")).unwrap();
    std::fs::write(raw.join("images/recursion.bin"), code).unwrap();
    std::fs::write(raw.join("images/recursion.sym"), &nm).unwrap();
    let toml = std::fs::read_to_string(sample.join("bundle.toml")).unwrap();
    let ctl = toml.lines().next().unwrap();
    std::fs::write(
        raw.join("bundle.toml"),
        format!(
            "{ctl}\n\n[[image]]\npath = \"images/recursion.bin\"\nbase = \"{addr:#x}\"\n\
             kind = \"raw\"\nsymbols = \"images/recursion.sym\"\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    ok(&["decode", s(&raw), "--out", s(&out), "-q", "-j", "1"]);

    let by_function = |dir: &Path| {
        let (header, rows, _) = hotspots_csv(dir);
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        rows.iter()
            .map(|r| {
                (
                    r[col("function")].clone(),
                    r[col("instructions")].parse::<u64>().unwrap(),
                )
            })
            .collect::<BTreeMap<String, u64>>()
    };
    let (_elf_tmp, elf_out) = decoded("recursion");
    let want = by_function(&elf_out);
    let got = by_function(&out);
    assert!(want.contains_key("insert"), "{want:?}");
    assert_eq!(got, want, "raw image + symbol file against the ELF");

    // Without the symbol file the same code is shown by offset, never hidden.
    std::fs::remove_file(raw.join("images/recursion.sym")).unwrap();
    let (header, rows, o) = hotspots_csv(&out);
    assert!(stderr(&o).contains("recursion.sym"), "{}", stderr(&o));
    let f = header.iter().position(|h| h == "function").unwrap();
    assert!(
        rows.iter().all(|r| r[f].starts_with("recursion.bin+0x")),
        "{rows:?}"
    );
}
