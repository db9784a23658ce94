//! Real executions: a static x86-64 program run under qemu-user with every instruction
//! logged.
//!
//! ```text
//! qemu-x86_64 -singlestep -strace -d exec,nochain -D <log> <program> <args...>
//! ```
//!
//! `-singlestep` makes every translation block one instruction and `nochain` stops qemu
//! from jumping block to block without logging, so the log has one `Trace` line per
//! executed instruction, in order:
//!
//! ```text
//! Trace 0: 0x7f793c400100 [0000000000000000/00000000004014f0/1040c0b3/00000201] _start
//! ```
//!
//! (the guest PC is the second bracketed field). What else the log says, and what qemu
//! 7.2 does that a reader must know:
//!
//! - **REP string instructions** log one line per iteration (consecutive identical PCs)
//!   but retire once: consecutive repeats of a REP-prefixed string instruction collapse.
//! - **Asynchronous signals** are taken between blocks. qemu has often already logged the
//!   next block when it notices the pending signal, and then writes
//!   `Stopped execution of TB chain before 0x… [<pc>] …`: that instruction did not run, so
//!   the step stream gets an interrupt *before* it.
//! - **`-strace`** adds the program's system calls (`<pid> write(1,…) = 5`) and each
//!   delivered signal: `--- SIGSEGV {si_signo=SIGSEGV, si_code=1, …} ---`. A numeric
//!   `si_code` > 0 is a kernel-generated fault (SEGV_MAPERR, FPE_INTDIV, ILL_ILLOPN, …): the
//!   last logged instruction faulted and did not retire, so it becomes an interrupt before
//!   that instruction. Named codes (SI_USER, SI_TKILL, SI_KERNEL for timers and int3) are
//!   signals delivered after the last instruction retired; the next logged address (the
//!   handler) is then that instruction's successor.
//! - qemu 7.2 maps **no vdso** for x86-64 guests, and static glibc falls back to real
//!   system calls, so every executed address lies in the program's own executable
//!   segments; the signal return trampoline is glibc's `__restore_rt`, also in the ELF.
//! - The first line is the ELF entry point (`_start`), the last is normally the
//!   `exit_group` system call.
//!
//! Only static, non-PIE (`ET_EXEC`) single-threaded programs are accepted: their code is
//! at the ELF's own addresses, which is what [`Execution::images`] promises.
//!
//! The log holds ~80 bytes per executed instruction (a million instructions is 80 MB).
//! qemu writes it line-buffered — one `write` per instruction — which is cheapest into
//! tmpfs, so the log goes to `/dev/shm` when that is writable (else the system temporary
//! directory) and is read back as a stream, then deleted.
//!
//! ```no_run
//! use std::path::Path;
//! use tracemill_datasets::exec::qemu;
//!
//! qemu::check_tools()?; // a clear error naming the missing tool
//! let cap = qemu::trace(Path::new("/usr/bin/busybox"), &["sha256sum"], b"hello\n")?;
//! println!("{} steps, {} instructions", cap.execution.steps.len(), cap.stats.retired);
//! # Ok::<(), qemu::QemuError>(())
//! ```

use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{elf, Endianness};
use tracemill_decode::image::ImageSet;

use super::steps::{StepBuilder, StepError};
use super::{Execution, Step};

/// The qemu binary.
pub const QEMU: &str = "qemu-x86_64";
/// The C compiler for sample programs.
pub const GCC: &str = "gcc";

/// Why a capture failed.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    #[error("`{tool}` is not installed or not on PATH; {hint}")]
    ToolMissing {
        tool: &'static str,
        hint: &'static str,
    },
    #[error("compiling {src} failed:\n{stderr}")]
    Compile { src: PathBuf, stderr: String },
    #[error("{path}: {what}")]
    Program { path: PathBuf, what: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("qemu log line {line}: {what}")]
    Log { line: u64, what: String },
    #[error("qemu log line {line}: {source}")]
    Steps {
        line: u64,
        #[source]
        source: StepError,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> QemuError {
    let what = what.into();
    move |source| QemuError::Io { what, source }
}

fn missing(tool: &'static str) -> QemuError {
    QemuError::ToolMissing {
        tool,
        hint: match tool {
            QEMU => "install qemu user-mode emulation (Debian/Ubuntu: apt-get install qemu-user)",
            _ => "install a C toolchain with static glibc (Debian/Ubuntu: apt-get install gcc libc6-dev)",
        },
    }
}

fn runs(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `qemu-x86_64` can be run.
pub fn qemu_available() -> bool {
    runs(QEMU)
}

/// `gcc` can be run.
pub fn gcc_available() -> bool {
    runs(GCC)
}

/// `Ok` when everything [`trace_c`] needs is installed, else the first missing tool.
pub fn check_tools() -> Result<(), QemuError> {
    if !qemu_available() {
        return Err(missing(QEMU));
    }
    if !gcc_available() {
        return Err(missing(GCC));
    }
    Ok(())
}

/// The sample programs shipped with this crate (`datasets/programs/*.c`).
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// `gcc -static -O2 -g -o out src`, run in the source's directory with that directory
/// mapped to `datasets/programs` in the debug info, so that the DWARF names the source
/// `datasets/programs/NAME.c` wherever the checkout is (reports resolve it from the
/// repository root) and the image is the same byte for byte on every machine. `-g`
/// changes no code (GCC guarantees it), only adds sections that are not loaded.
pub fn compile_c(src: &Path, out: &Path) -> Result<(), QemuError> {
    let src = std::path::absolute(src).unwrap_or_else(|_| src.to_path_buf());
    let out = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    let dir = src.parent().unwrap_or(Path::new("/"));
    let file = src
        .file_name()
        .map_or_else(|| src.clone().into_os_string(), |f| f.to_os_string());
    let mut prefix_map = std::ffi::OsString::from("-fdebug-prefix-map=");
    prefix_map.push(dir.as_os_str());
    prefix_map.push("=datasets/programs");
    let output = Command::new(GCC)
        .args(["-static", "-O2", "-g"])
        .arg(prefix_map)
        .arg("-o")
        .arg(&out)
        .arg(&file)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => missing(GCC),
            _ => QemuError::Io {
                what: format!("running {GCC}"),
                source: e,
            },
        })?;
    if !output.status.success() {
        return Err(QemuError::Compile {
            src: src.to_path_buf(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(())
}

/// What the log contained besides the steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// `Trace` lines.
    pub traced: u64,
    /// Instructions retired (after collapsing REP iterations and dropping instructions
    /// that did not run).
    pub retired: u64,
    /// `Trace` lines that were further iterations of a REP instruction.
    pub rep_iterations: u64,
    /// `Stopped execution` lines (an instruction logged but not run).
    pub stopped: u64,
    /// Signals delivered (`--- SIG…` lines).
    pub signals: u64,
    /// Of which faults: the last instruction did not retire.
    pub faults: u64,
    /// System calls (strace lines).
    pub syscalls: u64,
}

/// Turns a qemu `-d exec -strace` log into steps, line by line.
pub struct LogParser<'i, 'a> {
    builder: StepBuilder<'i, 'a>,
    /// Last logged address, not yet retired: the next line says whether it ran.
    pending: Option<u64>,
    /// Lines read so far (for error messages).
    line: u64,
    stats: LogStats,
}

impl<'i, 'a> LogParser<'i, 'a> {
    pub fn new(images: &'i ImageSet<'a>) -> Self {
        LogParser {
            builder: StepBuilder::new(images),
            pending: None,
            line: 0,
            stats: LogStats::default(),
        }
    }

    /// Feed one line (with or without its newline).
    pub fn line(&mut self, line: &[u8]) -> Result<(), QemuError> {
        self.line += 1;
        if let Some(rest) = line.strip_prefix(b"Trace ") {
            return self.trace(rest);
        }
        if line.starts_with(b"Stopped execution of TB chain before ") {
            let pc = self.bracketed_pc(line, 0)?;
            self.stats.stopped += 1;
            if self.pending == Some(pc) {
                self.pending = None;
                self.builder.interrupt(pc);
            }
            return Ok(());
        }
        if line.starts_with(b"--- SIG") {
            self.stats.signals += 1;
            if is_fault(line) {
                self.stats.faults += 1;
                if let Some(pc) = self.pending.take() {
                    self.builder.interrupt(pc);
                }
            }
            return Ok(());
        }
        if line.first().is_some_and(u8::is_ascii_digit) {
            // strace: "<pid> name(args) = result" or "<pid> Unknown syscall N".
            self.stats.syscalls += 1;
        }
        // A syscall that never returns (exit_group) leaves its strace line open; a
        // following `Trace` would then start mid-line.
        if let Some(at) = find(line, b"Trace ") {
            return self.trace(&line[at + 6..]);
        }
        Ok(())
    }

    /// After `Trace `: `<cpu>: <host ptr> [<cs_base>/<pc>/<flags>/<cflags>] <symbol>`.
    fn trace(&mut self, rest: &[u8]) -> Result<(), QemuError> {
        if !rest.starts_with(b"0:") {
            return Err(self.bad("more than one guest CPU: threads are not supported"));
        }
        let pc = self.bracketed_pc(rest, 1)?;
        self.stats.traced += 1;
        if let Some(p) = self.pending {
            if p == pc && self.is_rep(pc)? {
                self.stats.rep_iterations += 1;
                return Ok(());
            }
            self.retire(p)?;
        }
        self.pending = Some(pc);
        Ok(())
    }

    fn is_rep(&mut self, pc: u64) -> Result<bool, QemuError> {
        let line = self.line;
        self.builder
            .insn(pc)
            .map(|i| i.rep)
            .map_err(|source| QemuError::Steps { line, source })
    }

    fn retire(&mut self, pc: u64) -> Result<(), QemuError> {
        self.stats.retired += 1;
        let line = self.line;
        self.builder
            .retire(pc)
            .map_err(|source| QemuError::Steps { line, source })
    }

    /// Field `field` (0-based, `/`-separated) inside the first `[...]`, as hex.
    fn bracketed_pc(&self, line: &[u8], field: usize) -> Result<u64, QemuError> {
        let open = line
            .iter()
            .position(|&b| b == b'[')
            .ok_or_else(|| self.bad("no `[` in line"))?;
        let inner = &line[open + 1..];
        let close = inner
            .iter()
            .position(|&b| b == b']')
            .ok_or_else(|| self.bad("no `]` in line"))?;
        let text = inner[..close]
            .split(|&b| b == b'/')
            .nth(field)
            .ok_or_else(|| self.bad("too few fields in brackets"))?;
        parse_hex(text).ok_or_else(|| self.bad("bad hex address"))
    }

    #[cold]
    fn bad(&self, what: &str) -> QemuError {
        QemuError::Log {
            line: self.line,
            what: what.to_string(),
        }
    }

    /// The entry, the steps and the statistics.
    pub fn finish(mut self) -> Result<(u64, Vec<Step>, LogStats), QemuError> {
        if let Some(p) = self.pending.take() {
            self.retire(p)?;
        }
        let (entry, steps) = self.builder.finish();
        Ok((entry, steps, self.stats))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_hex(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 16 {
        return None;
    }
    text.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(16)?;
        Some(acc << 4 | d as u64)
    })
}

/// `--- SIGxxx {si_signo=…, si_code=<n>, …} ---` with a numeric code > 0.
fn is_fault(line: &[u8]) -> bool {
    let Some(at) = find(line, b"si_code=") else {
        return false;
    };
    let digits: Vec<u8> = line[at + 8..]
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits)
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .is_some_and(|c| c > 0)
}

/// Parse a whole log from a reader (streamed line by line).
pub fn parse_log(
    reader: impl BufRead,
    images: &ImageSet<'_>,
) -> Result<(u64, Vec<Step>, LogStats), QemuError> {
    let mut reader = reader;
    let mut p = LogParser::new(images);
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(io_err("reading the qemu log"))?;
        if n == 0 {
            break;
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        p.line(line)?;
    }
    p.finish()
}

/// A traced run.
#[derive(Clone, Debug)]
pub struct Capture {
    pub execution: Execution,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The program's exit code (`None` if a signal killed it).
    pub exit_code: Option<i32>,
    pub stats: LogStats,
}

/// Where logs go; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Directory for the temporary log (default: `/dev/shm` if writable, else the system
    /// temporary directory).
    pub log_dir: Option<PathBuf>,
}

/// Run a static x86-64 program under qemu with `args` and `stdin`, and return its steps.
pub fn trace(program: &Path, args: &[&str], stdin: &[u8]) -> Result<Capture, QemuError> {
    trace_with(program, args, stdin, &Options::default())
}

/// Compile a C source with [`compile_c`], then [`trace`] it.
pub fn trace_c(src: &Path, args: &[&str], stdin: &[u8]) -> Result<Capture, QemuError> {
    let dir = TempDir::new(None)?;
    let stem = src.file_stem().map_or("prog".into(), |s| s.to_os_string());
    let exe = dir.path().join(&stem);
    compile_c(src, &exe)?;
    trace_with(&exe, args, stdin, &Options::default())
}

/// [`trace`] with options.
pub fn trace_with(
    program: &Path,
    args: &[&str],
    stdin: &[u8],
    options: &Options,
) -> Result<Capture, QemuError> {
    let elf = fs::read(program).map_err(io_err(format!("reading {}", program.display())))?;
    check_static_exec(program, &elf)?;
    let file_name = program.file_name().map_or_else(
        || program.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut images = ImageSet::new();
    images
        .add_elf(&file_name, &elf, None, None)
        .map_err(|e| QemuError::Program {
            path: program.to_path_buf(),
            what: e.to_string(),
        })?;

    let dir = TempDir::new(options.log_dir.as_deref())?;
    let log = dir.path().join("exec.log");
    let mut child = Command::new(QEMU)
        .args(["-singlestep", "-strace", "-d", "exec,nochain", "-D"])
        .arg(&log)
        .arg(program)
        .args(args)
        // The guest sees no host environment, and qemu no QEMU_* settings: runs repeat
        // exactly on any machine.
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => missing(QEMU),
            _ => QemuError::Io {
                what: format!("starting {QEMU}"),
                source: e,
            },
        })?;
    // Feed stdin from a thread: a program that reads nothing must not block us.
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let output = child
        .wait_with_output()
        .map_err(io_err(format!("running {QEMU}")))?;
    let _ = feeder.join();
    let stderr = output.stderr;
    if !log.exists() {
        return Err(QemuError::Program {
            path: program.to_path_buf(),
            what: format!(
                "{QEMU} wrote no log: {}",
                String::from_utf8_lossy(&stderr).trim()
            ),
        });
    }
    let reader = BufReader::with_capacity(
        1 << 20,
        fs::File::open(&log).map_err(io_err(format!("opening {}", log.display())))?,
    );
    let (entry, steps, stats) = parse_log(reader, &images)?;
    drop(dir);
    drop(images);

    let mut name = file_name.clone();
    for a in args {
        name.push(' ');
        name.push_str(a);
    }
    Ok(Capture {
        execution: Execution {
            name,
            images: vec![(file_name, elf)],
            entry,
            steps,
        },
        stdout: output.stdout,
        stderr,
        exit_code: output.status.code(),
        stats,
    })
}

/// Only static non-PIE executables have their code where the ELF says.
fn check_static_exec(path: &Path, data: &[u8]) -> Result<(), QemuError> {
    let bad = |what: &str| QemuError::Program {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let file = ElfFile64::<Endianness>::parse(data)
        .map_err(|e| bad(&format!("not a 64-bit ELF file: {e}")))?;
    let endian = file.endian();
    let header = file.elf_header();
    if header.e_machine(endian) != elf::EM_X86_64 {
        return Err(bad("not an x86-64 program"));
    }
    if header.e_type(endian) != elf::ET_EXEC {
        return Err(bad(
            "not a static non-PIE executable (ET_EXEC): qemu would load it at an address \
             the trace cannot be matched to; build with `gcc -static`",
        ));
    }
    if file
        .elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == elf::PT_INTERP)
    {
        return Err(bad(
            "dynamically linked: shared libraries are not captured; build with `gcc -static`",
        ));
    }
    Ok(())
}

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(base: Option<&Path>) -> Result<TempDir, QemuError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let bases: Vec<PathBuf> = match base {
            Some(b) => vec![b.to_path_buf()],
            None => vec![PathBuf::from("/dev/shm"), std::env::temp_dir()],
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for b in &bases {
            for _ in 0..16 {
                let mut name = OsString::from("tracemill-qemu-");
                name.push(format!(
                    "{}-{}-{nanos}",
                    std::process::id(),
                    SERIAL.fetch_add(1, Ordering::Relaxed)
                ));
                let p = b.join(name);
                match fs::create_dir(&p) {
                    Ok(()) => return Ok(TempDir(p)),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => {
                        last = Some((b.clone(), e));
                        break;
                    }
                }
            }
        }
        let (b, e) = last.unwrap_or_else(|| {
            (
                bases[0].clone(),
                io::Error::new(io::ErrorKind::AlreadyExists, "no free name"),
            )
        });
        Err(QemuError::Io {
            what: format!("creating a temporary directory in {}", b.display()),
            source: e,
        })
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_decode::insn::InsnClass;

    /// ```text
    /// 1000 nop
    /// 1001 rep stosb   (f3 aa)
    /// 1003 nop
    /// 1004 syscall     (0f 05)
    /// 1006 nop
    /// 1007 jmp 1000    (eb f7)
    /// ```
    const CODE: [u8; 9] = [0x90, 0xF3, 0xAA, 0x90, 0x0F, 0x05, 0x90, 0xEB, 0xF7];

    fn trace_line(pc: u64) -> String {
        format!("Trace 0: 0x7f0000000100 [0000000000000000/{pc:016x}/1040c0b3/00000201] f\n")
    }

    fn parse(log: &str) -> (u64, Vec<Step>, LogStats) {
        let mut set = ImageSet::new();
        set.add_raw("t", &CODE, 0x1000, None);
        parse_log(log.as_bytes(), &set).unwrap()
    }

    #[test]
    fn rep_iterations_collapse_and_syscalls_continue_where_user_code_resumed() {
        let mut log = String::new();
        for pc in [0x1000, 0x1001, 0x1001, 0x1001, 0x1003, 0x1004] {
            log += &trace_line(pc);
        }
        log += "77 write(1,0x4ae1d0,3) = 3\n";
        log += &trace_line(0x1006);
        log += "77 exit_group(0)";
        let (entry, steps, stats) = parse(&log);
        assert_eq!(entry, 0x1000);
        assert_eq!(
            steps,
            [
                Step::Branch {
                    ip: 0x1004,
                    len: 2,
                    class: InsnClass::Syscall,
                    target: 0,
                    next: 0x1006,
                    insns: 4
                },
                Step::End {
                    insns: 1,
                    at: 0x1007
                }
            ]
        );
        assert_eq!(
            (
                stats.traced,
                stats.retired,
                stats.rep_iterations,
                stats.syscalls
            ),
            (7, 5, 2, 2)
        );
    }

    #[test]
    fn stopped_blocks_and_faults_did_not_run() {
        let mut log = String::new();
        log += &trace_line(0x1000);
        log += &trace_line(0x1001);
        log += &trace_line(0x1001); // one REP iteration done, then a signal
        log += "Stopped execution of TB chain before 0x7f0000000200 [0000000000001001] f\n";
        log += "--- SIGALRM {si_signo=SIGALRM, si_code=SI_KERNEL, si_pid=0, si_uid=0} ---\n";
        log += &trace_line(0x1006); // handler
        log += &trace_line(0x1007);
        log += &trace_line(0x1000);
        log += &trace_line(0x1001); // the REP resumes and completes
        log += &trace_line(0x1003);
        log += "--- SIGSEGV {si_signo=SIGSEGV, si_code=1, si_addr=NULL} ---\n";
        log += &trace_line(0x1006);
        let (entry, steps, stats) = parse(&log);
        assert_eq!(entry, 0x1000);
        assert_eq!(
            steps,
            [
                Step::Interrupt {
                    insns: 1,
                    at: 0x1001,
                    resume: 0x1006
                },
                Step::Branch {
                    ip: 0x1007,
                    len: 2,
                    class: InsnClass::Jmp,
                    target: 0x1000,
                    next: 0x1000,
                    insns: 2
                },
                Step::Interrupt {
                    insns: 2,
                    at: 0x1003,
                    resume: 0x1006
                },
                Step::End {
                    insns: 1,
                    at: 0x1007
                },
            ]
        );
        assert_eq!((stats.stopped, stats.signals, stats.faults), (1, 2, 1));
        assert_eq!(stats.retired, 6);
    }

    #[test]
    fn bad_lines_say_where() {
        let mut set = ImageSet::new();
        set.add_raw("t", &CODE, 0x1000, None);
        let log = format!("{}Trace 1: 0x0 [0/1000/0/0] f\n", trace_line(0x1000));
        let e = parse_log(log.as_bytes(), &set).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let log = trace_line(0x1000) + &trace_line(0x9000) + &trace_line(0x1000);
        let e = parse_log(log.as_bytes(), &set).unwrap_err();
        assert!(e.to_string().contains("0x9000"), "{e}");
    }

    #[test]
    fn fault_codes() {
        assert!(is_fault(
            b"--- SIGFPE {si_signo=SIGFPE, si_code=1, si_addr=0x40158f} ---"
        ));
        assert!(!is_fault(
            b"--- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL, si_pid=1} ---"
        ));
        assert!(!is_fault(
            b"--- SIGALRM {si_signo=SIGALRM, si_code=SI_KERNEL} ---"
        ));
        assert_eq!(parse_hex(b"00000000004014f0"), Some(0x4014f0));
        assert_eq!(parse_hex(b"x"), None);
    }
}
