//! The code images of a perf.data decode: the executable mappings its MMAP and MMAP2
//! records name, found as perf finds them and checked by build-id.
//!
//! Where a binary is looked for, in order (perf's `--symfs` and build-id cache):
//! 1. with `--symfs DIR`, `DIR` + the recorded path;
//! 2. the build-id cache (`--buildid-dir`, default `~/.debug`):
//!    `.build-id/<first 2 hex digits>/<the other 38>/elf`, then the older layout's
//!    `.build-id/<2>/<38>` (a link to the cached copy);
//! 3. the recorded path itself.
//!
//! The vDSO (`[vdso]`) is looked for in the build-id cache only (perf keeps a copy there,
//! `perf buildid-cache`), by the build-id HEADER_BUILD_ID gives it. Kernel code is given
//! on the command line: `--vmlinux FILE` (an ELF at its own addresses) or `--kcore FILE`
//! (a copy of `/proc/kcore`, an ELF core whose segments are the kernel's memory), as
//! perf's options of the same names.
//!
//! A candidate whose build-id differs from the one the recording names (the MMAP2 record's
//! or HEADER_BUILD_ID's) is passed over with a warning: the binary was rebuilt since, and
//! its code would decode into wrong rows. A mapping found nowhere is a warning that names
//! its path and build-id; decoding goes on, and the walk resumes at the next place it can.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment};
use tracemill_datasets::bundle::{ImageEntry, ImageKind};

/// Where to look for binaries.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    pub symfs: Option<PathBuf>,
    /// The build-id cache (`~/.debug` when `None`).
    pub buildid_dir: Option<PathBuf>,
    /// Kernel code: ELF files at their own addresses (`--vmlinux`, `--kcore`).
    pub kernel: Vec<PathBuf>,
}

/// An executable mapping as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Offset of the MMAP/MMAP2 record in the file.
    pub record_offset: u64,
    pub pid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: String,
    /// Hex build-id, from the record (MMAP2 with a build-id) or HEADER_BUILD_ID.
    pub build_id: Option<String>,
    /// The address space whose image it is, when another process has other code at
    /// these addresses (`super::spaces`); `None`: shared by every space.
    pub space: Option<u64>,
}

impl Mapping {
    /// Mappings that hold no file perf could read: anonymous memory, the vDSO, the
    /// kernel's `[...]` names, JIT dumps.
    pub fn is_file(&self) -> bool {
        !(self.path.is_empty()
            || self.is_vdso()
            || self.path.starts_with('[')
            || self.path.starts_with("//")
            || self.path.starts_with("/memfd:")
            || self.path.ends_with(" (deleted)"))
    }
}

impl Mapping {
    /// The vDSO: code the kernel maps into every process, found by build-id only.
    pub fn is_vdso(&self) -> bool {
        self.path == "[vdso]"
    }
}

/// The images of `mappings` (one per distinct file and load address) and of the kernel
/// files `lookup` names, and what could not be found or used.
pub fn resolve(mappings: &[Mapping], lookup: &Lookup) -> (Vec<ImageEntry>, Vec<String>) {
    let mut images = Vec::new();
    let mut problems = Vec::new();
    for k in &lookup.kernel {
        match std::fs::read(k).map(|b| object::File::parse(&*b).is_ok()) {
            Ok(true) => images.push(ImageEntry {
                path: k.display().to_string(),
                base: None,
                cr3: None,
                space: None,
                kind: ImageKind::Elf,
                symbols: None,
            }),
            Ok(false) => problems.push(format!("{}: not an ELF file: not used", k.display())),
            Err(e) => problems.push(format!("{}: {e}: not used", k.display())),
        }
    }
    // One image per (path, bias, space): a program's mapping recorded again for each
    // process (fork) or thread is the same code at the same place.
    let mut seen: BTreeMap<(String, u64, Option<u64>), ()> = BTreeMap::new();
    for m in mappings
        .iter()
        .filter(|m| m.is_file() || (m.is_vdso() && m.build_id.is_some()))
    {
        let candidates = candidates(m, lookup);
        let mut found = None;
        for c in &candidates {
            let Ok(bytes) = std::fs::read(c) else {
                continue;
            };
            let Ok(elf) = object::File::parse(&*bytes) else {
                problems.push(format!(
                    "{}: not an ELF file; the mapping of {} at {:#x} (record at offset {:#x}) \
                     is not decoded from it",
                    c.display(),
                    m.path,
                    m.addr,
                    m.record_offset
                ));
                continue;
            };
            let id = elf.build_id().ok().flatten().map(hex);
            if let (Some(want), Some(got)) = (&m.build_id, &id) {
                if want != got {
                    problems.push(format!(
                        "{}: build-id {got}, but the recording's {} has {want}: a different \
                         binary, not used",
                        c.display(),
                        m.path
                    ));
                    continue;
                }
            }
            found = Some((c.clone(), base_of(&elf, m)));
            break;
        }
        let Some((path, base)) = found else {
            problems.push(format!(
                "{} (build-id {}), mapped at {:#x}..{:#x} by process {} (record at offset \
                 {:#x}): not found (looked at {}); its code is not decoded (give --symfs or \
                 --buildid-dir)",
                m.path,
                m.build_id.as_deref().unwrap_or("unknown"),
                m.addr,
                m.addr.wrapping_add(m.len),
                m.pid,
                m.record_offset,
                candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        let key = (path.display().to_string(), base.unwrap_or(0), m.space);
        if seen.insert(key, ()).is_some() {
            continue;
        }
        images.push(ImageEntry {
            path: path.display().to_string(),
            base,
            cr3: None,
            space: m.space,
            kind: ImageKind::Elf,
            symbols: None,
        });
    }
    (images, problems)
}

/// Where to look for `m`'s file, in order.
fn candidates(m: &Mapping, lookup: &Lookup) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(root) = lookup.symfs.as_ref().filter(|_| !m.is_vdso()) {
        v.push(root.join(m.path.trim_start_matches('/')));
    }
    if let Some(id) = m.build_id.as_deref().filter(|id| id.len() > 2) {
        let cache = lookup
            .buildid_dir
            .clone()
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".debug")));
        if let Some(cache) = cache {
            let dir = cache.join(".build-id").join(&id[..2]);
            v.push(dir.join(&id[2..]).join("elf"));
            v.push(dir.join(&id[2..]));
        }
    }
    // The vDSO has no file: only the cache holds it.
    if !m.is_vdso() {
        v.push(PathBuf::from(&m.path));
    }
    v
}

/// `ImageEntry::base` for an ELF mapped as `m` says: `None` where the file is at its own
/// addresses (a static or non-PIE executable), else where its lowest PT_LOAD goes.
fn base_of(elf: &object::File<'_>, m: &Mapping) -> Option<u64> {
    let segs: Vec<(u64, u64, u64)> = elf
        .segments()
        .map(|s| (s.address(), s.file_range().0, s.file_range().1))
        .collect();
    let lowest = segs.iter().map(|s| s.0).min()?;
    // The segment whose file bytes hold the mapping's offset: its address in the file's
    // own layout, against where the mapping put it.
    let (vaddr, off, _) = segs
        .iter()
        .copied()
        .find(|&(_, off, size)| off <= m.pgoff && m.pgoff < off + size.max(1))?;
    let own = vaddr.wrapping_add(m.pgoff - off);
    let bias = m.addr.wrapping_sub(own);
    (bias != 0).then(|| lowest.wrapping_add(bias))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(path: &str, id: Option<&str>) -> Mapping {
        Mapping {
            record_offset: 0x100,
            pid: 7,
            addr: 0x400000,
            len: 0x1000,
            pgoff: 0,
            path: path.to_string(),
            build_id: id.map(str::to_string),
            space: None,
        }
    }

    #[test]
    fn candidates_follow_perfs_order_symfs_then_build_id_cache_then_the_path() {
        let m = mapping(
            "/usr/bin/prog",
            Some("0123456789abcdef0123456789abcdef01234567"),
        );
        let l = Lookup {
            symfs: Some("/sym".into()),
            buildid_dir: Some("/cache".into()),
            kernel: Vec::new(),
        };
        let c = candidates(&m, &l);
        assert_eq!(
            c,
            [
                PathBuf::from("/sym/usr/bin/prog"),
                PathBuf::from("/cache/.build-id/01/23456789abcdef0123456789abcdef01234567/elf"),
                PathBuf::from("/cache/.build-id/01/23456789abcdef0123456789abcdef01234567"),
                PathBuf::from("/usr/bin/prog"),
            ]
        );
    }

    #[test]
    fn anonymous_and_kernel_mappings_are_not_files() {
        for p in [
            "",
            "[vdso]",
            "[heap]",
            "//anon",
            "/memfd:x (deleted)",
            "/tmp/a (deleted)",
        ] {
            assert!(!mapping(p, None).is_file(), "{p}");
        }
        assert!(mapping("/bin/ls", None).is_file());
    }

    #[test]
    fn the_vdso_is_looked_for_in_the_build_id_cache_only() {
        let m = mapping("[vdso]", Some("0123456789abcdef0123456789abcdef01234567"));
        let l = Lookup {
            symfs: Some("/sym".into()),
            buildid_dir: Some("/cache".into()),
            kernel: Vec::new(),
        };
        let c = candidates(&m, &l);
        assert_eq!(c.len(), 2);
        assert!(
            c.iter().all(|p| p.starts_with("/cache/.build-id/01")),
            "{c:?}"
        );
        // Without a build-id it cannot be found: not looked for, and no problem said.
        let (images, problems) = resolve(&[mapping("[vdso]", None)], &l);
        assert!(images.is_empty() && problems.is_empty());
        // A copy in the cache (this test's own ELF standing in) is used.
        let tmp = tempfile::tempdir().unwrap();
        let elf = std::fs::read("/proc/self/exe").unwrap();
        let id = object::File::parse(&*elf)
            .unwrap()
            .build_id()
            .unwrap()
            .map(hex);
        if let Some(id) = id {
            let dir = tmp.path().join(".build-id").join(&id[..2]).join(&id[2..]);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("elf"), &elf).unwrap();
            let l = Lookup {
                buildid_dir: Some(tmp.path().to_path_buf()),
                ..Lookup::default()
            };
            let (images, problems) = resolve(&[mapping("[vdso]", Some(&id))], &l);
            assert_eq!(images.len(), 1, "{problems:?}");
            assert!(images[0].path.ends_with("/elf"));
        }
    }

    #[test]
    fn kernel_files_are_images_at_their_own_addresses_and_others_are_named() {
        let l = Lookup {
            kernel: vec![
                "/proc/self/exe".into(),
                "/nonexistent/vmlinux".into(),
                "/etc/hostname".into(),
            ],
            ..Lookup::default()
        };
        let (images, problems) = resolve(&[], &l);
        assert_eq!(images.len(), 1);
        assert_eq!(
            (images[0].path.as_str(), images[0].base),
            ("/proc/self/exe", None)
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("/nonexistent/vmlinux"));
        assert!(problems[1].contains("not an ELF"));
    }

    #[test]
    fn a_missing_binary_is_a_problem_naming_path_build_id_and_record() {
        let m = mapping("/nonexistent/prog", Some("aa"));
        let (images, problems) = resolve(&[m], &Lookup::default());
        assert!(images.is_empty());
        assert_eq!(problems.len(), 1);
        let p = &problems[0];
        assert!(
            p.contains("/nonexistent/prog") && p.contains("build-id aa"),
            "{p}"
        );
        assert!(p.contains("offset 0x100") && p.contains("--symfs"), "{p}");
    }
}
