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
use std::path::{Component, Path, PathBuf};

use crate::manifest::{ImageEntry, ImageKind};
use object::{Object, ObjectSegment};

use crate::bundle::map_file;

/// Where to look for binaries.
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    pub symfs: Option<PathBuf>,
    /// The build-id cache (`~/.debug` when `None`, or `DIR/.debug` when confined to `DIR`).
    pub buildid_dir: Option<PathBuf>,
    /// Kernel code: ELF files at their own addresses (`--vmlinux`, `--kcore`), kept
    /// apart so that a message names the option given.
    pub vmlinux: Vec<PathBuf>,
    pub kcore: Vec<PathBuf>,
    /// Unattended reading (`ingest` without `--allow-outside-paths`): a recorded path is
    /// opened only when it lies inside this directory (the recording's), symbolic links
    /// resolved, and the build-id cache defaults to `DIR/.debug`. A perf.data from another
    /// host names any path it likes (`/etc/shadow`, `/dev/zero`); it must not make the run
    /// read this machine's files. `--symfs` and `--buildid-dir` are the user's, and used.
    pub confine: Option<PathBuf>,
}

impl Lookup {
    /// The kernel files, `--vmlinux`'s then `--kcore`'s (a kcore directory's file).
    pub fn kernel(&self) -> impl Iterator<Item = PathBuf> + '_ {
        let kcore = self.kcore.iter().map(|k| kcore_file(k));
        self.vmlinux.iter().cloned().chain(kcore)
    }

    /// The build-id cache searched.
    fn cache(&self) -> Option<PathBuf> {
        if let Some(d) = &self.buildid_dir {
            return Some(d.clone());
        }
        match &self.confine {
            Some(dir) => Some(dir.join(".debug")),
            None => std::env::var_os("HOME").map(|h| Path::new(&h).join(".debug")),
        }
    }
}

/// The kcore copy `--kcore` names: the file itself, or in a directory the `kcore` of
/// `perf record --kcore`'s `kcore_dir` (given as that directory, or as the recording's
/// directory that holds it).
pub fn kcore_file(given: &Path) -> PathBuf {
    if !given.is_dir() {
        return given.to_path_buf();
    }
    [given.join("kcore"), given.join("kcore_dir").join("kcore")]
        .into_iter()
        .find(|k| k.is_file())
        .unwrap_or_else(|| given.join("kcore"))
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
    /// A kernel module (perf's records of the modules loaded: the kernel's pid, -1, and
    /// the `.ko` file's path, compressed or not). Its code is read from a kcore copy,
    /// not from the file: the kernel relocates a module's code when it loads it, and
    /// ftrace and the alternatives patch it, so the file's bytes are not what ran (why
    /// perf's Intel PT documentation asks for a kcore copy to decode kernel code).
    pub fn is_kernel_module(&self) -> bool {
        let p = self.path.as_str();
        self.pid == u32::MAX
            && [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
                .iter()
                .any(|e| p.ends_with(e))
    }

    /// The vDSO: code the kernel maps into every process, found by build-id only.
    pub fn is_vdso(&self) -> bool {
        self.path == "[vdso]"
    }
}

/// The images of `mappings` (one per distinct file and load address) and of the kernel
/// files `lookup` names, and what could not be found or used.
///
/// Every candidate is opened as a bundle's files are ([`map_file`]): regular files only,
/// without blocking (a FIFO named by a recording must not hang the run), mapped rather
/// than read (a 4 GB file costs address space, not memory; `/dev/zero` is refused as a
/// device). Messages name paths and record offsets, never what a file holds.
pub fn resolve(mappings: &[Mapping], lookup: &Lookup) -> (Vec<ImageEntry>, Vec<String>) {
    let mut images = Vec::new();
    let mut problems = Vec::new();
    for k in lookup.kernel() {
        let elf = map_file(&k).map(|b| object::File::parse(&*b).is_ok());
        match elf {
            Ok(true) => images.push(ImageEntry {
                path: k.display().to_string(),
                base: None,
                cr3: None,
                space: None,
                kind: ImageKind::Elf,
                symbols: None,
            }),
            Ok(false) => problems.push(format!("{}: not an ELF file: not used", k.display())),
            Err(e) => problems.push(format!("{e:#}: not used")),
        }
    }
    let modules: Vec<&Mapping> = mappings.iter().filter(|m| m.is_kernel_module()).collect();
    if !modules.is_empty() && lookup.kcore.is_empty() {
        let named: Vec<String> = modules
            .iter()
            .take(3)
            .map(|m| format!("{} at {:#x}", m.path, m.addr))
            .collect();
        problems.push(format!(
            "{} kernel module{} mapped ({}{}; first record at offset {:#x}): a module's code \
             is decoded from a kcore copy only (--kcore, as `perf record --kcore` makes \
             it), not from its .ko file, which the kernel relocated and patched when it \
             loaded it; its code is not decoded",
            modules.len(),
            if modules.len() == 1 { "" } else { "s" },
            named.join(", "),
            if modules.len() > 3 { ", ..." } else { "" },
            modules[0].record_offset
        ));
    }
    // One image per (path, bias, space): a program's mapping recorded again for each
    // process (fork) or thread is the same code at the same place.
    let mut seen: BTreeMap<(String, u64, Option<u64>), ()> = BTreeMap::new();
    for m in mappings
        .iter()
        .filter(|m| !m.is_kernel_module() && (m.is_file() || (m.is_vdso() && m.build_id.is_some())))
    {
        let candidates = candidates(m, lookup);
        let mut found = None;
        let mut passed_over = Vec::new();
        for c in &candidates {
            let path = match c {
                Candidate::At(p) => p,
                Candidate::Refused(why) => {
                    passed_over.push(why.clone());
                    continue;
                }
            };
            let bytes = match map_file(path) {
                Ok(b) => b,
                Err(e) => {
                    // Not there is the ordinary case (the next place is tried); anything
                    // else (a FIFO, a device, a directory, no permission) is said.
                    if path.exists() {
                        problems.push(format!(
                            "{e:#}; the mapping of {} at {:#x} (record at offset {:#x}) is \
                             not decoded from it",
                            m.path, m.addr, m.record_offset
                        ));
                    }
                    continue;
                }
            };
            let Ok(elf) = object::File::parse(&*bytes) else {
                problems.push(format!(
                    "{}: not an ELF file; the mapping of {} at {:#x} (record at offset {:#x}) \
                     is not decoded from it",
                    path.display(),
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
                        path.display(),
                        m.path
                    ));
                    continue;
                }
            }
            found = Some((path.clone(), base_of(&elf, m)));
            break;
        }
        let Some((path, base)) = found else {
            let looked: Vec<String> = candidates
                .iter()
                .filter_map(|c| match c {
                    Candidate::At(p) => Some(p.display().to_string()),
                    Candidate::Refused(_) => None,
                })
                .collect();
            let mut why = format!(
                "{} (build-id {}), mapped at {:#x}..{:#x} by process {} (record at offset \
                 {:#x}): not found (looked at {})",
                m.path,
                m.build_id.as_deref().unwrap_or("unknown"),
                m.addr,
                m.addr.wrapping_add(m.len),
                m.pid,
                m.record_offset,
                if looked.is_empty() {
                    "nothing".to_string()
                } else {
                    looked.join(", ")
                }
            );
            for p in &passed_over {
                why.push_str("; ");
                why.push_str(p);
            }
            why.push_str(if lookup.confine.is_some() {
                "; its code is not decoded (give --symfs or --buildid-dir, or put perf's \
                 build-id cache in .debug beside the recording)"
            } else {
                "; its code is not decoded (give --symfs or --buildid-dir)"
            });
            problems.push(why);
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

/// A place to look for a mapping's file, or why a place was not looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Candidate {
    /// The file to open: symbolic links resolved where it exists, and inside the
    /// directory it was looked for under.
    At(PathBuf),
    Refused(String),
}

/// Where to look for `m`'s file, in order.
fn candidates(m: &Mapping, lookup: &Lookup) -> Vec<Candidate> {
    let mut v = Vec::new();
    let recorded = Path::new(&m.path);
    // `..` in a recorded name would climb out of any root it is looked for under.
    let climbs = recorded.components().any(|c| c == Component::ParentDir);
    if let Some(root) = lookup.symfs.as_ref().filter(|_| !m.is_vdso()) {
        if climbs {
            v.push(Candidate::Refused(format!(
                "the recorded name has `..` in it: not looked for under --symfs {}",
                root.display()
            )));
        } else {
            v.push(under(
                root,
                &root.join(recorded.strip_prefix("/").unwrap_or(recorded)),
                "--symfs",
            ));
        }
    }
    if let Some(id) = m
        .build_id
        .as_deref()
        .filter(|id| id.len() > 2 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        if let Some(cache) = lookup.cache() {
            let dir = cache.join(".build-id").join(&id[..2]);
            v.push(under(
                &cache,
                &dir.join(&id[2..]).join("elf"),
                "the build-id cache",
            ));
            v.push(under(&cache, &dir.join(&id[2..]), "the build-id cache"));
        }
    }
    // The vDSO has no file: only the cache holds it.
    if !m.is_vdso() {
        if !recorded.is_absolute() {
            // perf records absolute names; a relative one would be opened against
            // whatever directory tracemill runs in.
            v.push(Candidate::Refused(
                "a relative name is never looked for in the current directory".to_string(),
            ));
        } else if let Some(dir) = &lookup.confine {
            v.push(match under(dir, recorded, "the recording's directory") {
                Candidate::Refused(_) => Candidate::Refused(format!(
                    "{} is outside the recording's directory {}: not read \
                     (--allow-outside-paths reads it)",
                    m.path,
                    dir.display()
                )),
                c => c,
            });
        } else {
            v.push(Candidate::At(recorded.to_path_buf()));
        }
    }
    v
}

/// `path` looked for under `root` (named `what` in messages): the file itself, symbolic
/// links resolved, when it lies inside `root`; refused when a link (or `..` after the
/// root) leads out. The root is the user's: `..` in it is theirs to write (`--symfs
/// ../sysroot`). A path that does not exist is a candidate as it is (it is not found
/// when opened).
fn under(root: &Path, path: &Path, what: &str) -> Candidate {
    let below = path.strip_prefix(root).unwrap_or(path);
    if below.components().any(|c| c == Component::ParentDir) {
        return Candidate::Refused(format!(
            "{}: has `..` in it: not looked for under {what} {}",
            path.display(),
            root.display()
        ));
    }
    let Ok(real) = path.canonicalize() else {
        // Not there (or a dangling link): opening it finds nothing. Still only inside.
        return if path.starts_with(root) {
            Candidate::At(path.to_path_buf())
        } else {
            Candidate::Refused(format!(
                "{}: outside {what} {}: not read",
                path.display(),
                root.display()
            ))
        };
    };
    match root.canonicalize() {
        Ok(r) if real.starts_with(&r) => Candidate::At(real),
        _ => Candidate::Refused(format!(
            "{}: leads out of {what} {} (to {}): not read",
            path.display(),
            root.display(),
            real.display()
        )),
    }
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

    fn at(p: &str) -> Candidate {
        Candidate::At(PathBuf::from(p))
    }

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
            ..Lookup::default()
        };
        let c = candidates(&m, &l);
        assert_eq!(
            c,
            [
                at("/sym/usr/bin/prog"),
                at("/cache/.build-id/01/23456789abcdef0123456789abcdef01234567/elf"),
                at("/cache/.build-id/01/23456789abcdef0123456789abcdef01234567"),
                at("/usr/bin/prog"),
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
            ..Lookup::default()
        };
        let c = candidates(&m, &l);
        assert_eq!(c.len(), 2);
        assert!(
            c.iter()
                .all(|p| matches!(p, Candidate::At(p) if p.starts_with("/cache/.build-id/01"))),
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
    fn kernel_modules_are_never_read_from_their_ko_files_and_without_kcore_are_named() {
        // A .ko that exists (this test's own ELF standing in): not opened, not an image.
        let tmp = tempfile::tempdir().unwrap();
        let ko = tmp.path().join("fuse.ko");
        std::fs::copy("/proc/self/exe", &ko).unwrap();
        let module = |path: &str, pid| Mapping {
            pid,
            addr: 0xffff_ffff_c000_0000,
            ..mapping(path, None)
        };
        let ko = ko.display().to_string();
        let mods = [
            module(&ko, u32::MAX),
            module("/lib/modules/6.1.0/kernel/fs/xfs/xfs.ko.xz", u32::MAX),
        ];
        let (images, problems) = resolve(&mods, &Lookup::default());
        assert!(images.is_empty(), "{images:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("2 kernel modules mapped")
                && problems[0].contains("fuse.ko at 0xffffffffc0000000")
                && problems[0].contains("--kcore"),
            "{problems:?}"
        );
        // With a kcore copy its code is there: nothing to say about the modules.
        let l = Lookup {
            kcore: vec!["/proc/self/exe".into()],
            ..Lookup::default()
        };
        let (images, problems) = resolve(&mods, &l);
        assert_eq!((images.len(), problems.len()), (1, 0), "{problems:?}");
        // A process's own file named .ko is a file like any other.
        assert!(!module(&ko, 42).is_kernel_module());
        let (images, _) = resolve(&[module(&ko, 42)], &Lookup::default());
        assert_eq!(images.len(), 1);
    }

    #[test]
    fn kernel_files_are_images_at_their_own_addresses_and_others_are_named() {
        let l = Lookup {
            vmlinux: vec![
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

    /// `resolve` of `m`, on a thread: a test of a FIFO must fail, not hang, if the open
    /// ever blocks again.
    fn resolve_within_seconds(m: Mapping, l: Lookup) -> (Vec<ImageEntry>, Vec<String>) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(resolve(&[m], &l));
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("resolve returned (a FIFO or a device must not block it)")
    }

    fn this_elf() -> (Vec<u8>, Option<String>) {
        let elf = std::fs::read("/proc/self/exe").unwrap();
        let id = object::File::parse(&*elf)
            .unwrap()
            .build_id()
            .unwrap()
            .map(hex);
        (elf, id)
    }

    #[test]
    fn a_fifo_or_a_device_named_by_a_recording_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("prog");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo");
        // At the recorded path, and under --symfs.
        for (m, l) in [
            (mapping(fifo.to_str().unwrap(), None), Lookup::default()),
            (
                mapping("/prog", None),
                Lookup {
                    symfs: Some(tmp.path().to_path_buf()),
                    ..Lookup::default()
                },
            ),
        ] {
            let (images, problems) = resolve_within_seconds(m, l);
            assert!(images.is_empty());
            assert!(problems.iter().any(|p| p.contains("FIFO")), "{problems:?}");
        }
        let (images, problems) =
            resolve_within_seconds(mapping("/dev/zero", None), Lookup::default());
        assert!(images.is_empty());
        assert!(
            problems
                .iter()
                .any(|p| p.contains("/dev/zero") && p.contains("character device")),
            "{problems:?}"
        );
        // A --vmlinux that is a FIFO, likewise.
        let l = Lookup {
            vmlinux: vec![fifo.clone()],
            ..Lookup::default()
        };
        let (images, problems) = resolve_within_seconds(mapping("", None), l);
        assert!(
            images.is_empty() && problems[0].contains("FIFO"),
            "{problems:?}"
        );
    }

    #[test]
    fn symfs_is_never_left_by_dot_dot_or_a_symbolic_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        // A link out of the root, to a real ELF.
        std::os::unix::fs::symlink("/proc/self/exe", root.join("usr/bin/out")).unwrap();
        let l = Lookup {
            symfs: Some(root.clone()),
            buildid_dir: Some(tmp.path().join("no-cache")),
            ..Lookup::default()
        };
        // `..` climbing out: not looked for under the root; the recorded path itself is
        // the user's to read (decode), and it does not exist.
        let c = candidates(&mapping("/../../../../../proc/self/exe", None), &l);
        assert!(
            matches!(&c[0], Candidate::Refused(w) if w.contains("`..`")),
            "{c:?}"
        );
        let c = candidates(&mapping("/usr/bin/out", None), &l);
        assert!(
            matches!(&c[0], Candidate::Refused(w) if w.contains("leads out of --symfs")),
            "{c:?}"
        );
        // A file inside the root is used, at its real place.
        let (elf, _) = this_elf();
        std::fs::write(root.join("usr/bin/in"), &elf).unwrap();
        let (images, problems) = resolve(&[mapping("/usr/bin/in", None)], &l);
        assert_eq!(images.len(), 1, "{problems:?}");
        assert!(images[0].path.ends_with("usr/bin/in"));
        // A root named with `..` of its own (the user's) is still looked under.
        let l = Lookup {
            symfs: Some(tmp.path().join("root/usr/../../root")),
            ..l
        };
        let (images, problems) = resolve(&[mapping("/usr/bin/in", None)], &l);
        assert_eq!(images.len(), 1, "a root with `..` in it: {problems:?}");
    }

    #[test]
    fn a_relative_name_is_never_looked_for_in_the_current_directory() {
        let c = candidates(&mapping("prog", None), &Lookup::default());
        assert_eq!(c.len(), 1);
        assert!(
            matches!(&c[0], Candidate::Refused(w) if w.contains("current directory")),
            "{c:?}"
        );
        let (images, problems) = resolve(&[mapping("prog", None)], &Lookup::default());
        assert!(images.is_empty());
        assert!(problems[0].contains("looked at nothing"), "{problems:?}");
    }

    #[test]
    fn confined_lookups_read_nothing_outside_the_recordings_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let l = Lookup {
            confine: Some(dir.clone()),
            ..Lookup::default()
        };
        // A recorded path outside (an ELF that exists): not read, and said why.
        let (images, problems) = resolve(&[mapping("/proc/self/exe", None)], &l);
        assert!(images.is_empty());
        assert!(
            problems[0].contains("outside the recording's directory")
                && problems[0].contains("--allow-outside-paths"),
            "{problems:?}"
        );
        // A link inside the directory to a file outside: refused too.
        std::os::unix::fs::symlink("/proc/self/exe", dir.join("link")).unwrap();
        let link = dir.join("link").display().to_string();
        let (images, problems) = resolve(&[mapping(&link, None)], &l);
        assert!(images.is_empty(), "{problems:?}");
        // The build-id cache beside the recording (`.debug`) is where confined lookups
        // find binaries; a file inside the directory at its recorded path is used too.
        let (elf, id) = this_elf();
        if let Some(id) = id {
            let e = dir.join(".debug/.build-id").join(&id[..2]).join(&id[2..]);
            std::fs::create_dir_all(&e).unwrap();
            std::fs::write(e.join("elf"), &elf).unwrap();
            let (images, problems) = resolve(&[mapping("/usr/bin/gone", Some(&id))], &l);
            assert_eq!(images.len(), 1, "{problems:?}");
            assert!(images[0].path.starts_with(dir.to_str().unwrap()));
        }
        std::fs::write(dir.join("prog"), &elf).unwrap();
        let inside = dir.join("prog").display().to_string();
        let (images, problems) = resolve(&[mapping(&inside, None)], &l);
        assert_eq!(images.len(), 1, "{problems:?}");
    }
}
