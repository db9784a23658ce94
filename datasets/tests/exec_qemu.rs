//! Real programs under qemu: every sample program and a few busybox applets are traced,
//! turned into steps and re-walked against their ELF by the step checker.

use std::path::Path;
use std::process::{Command, Stdio};

use tracemill_datasets::exec::qemu::{self, Capture};
use tracemill_datasets::exec::steps::{CheckStats, Checker};
use tracemill_datasets::exec::Step;
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::InsnClass;

const BUSYBOX: &str = "/usr/bin/busybox";

mod common;

/// Whether qemu-user and gcc are installed; if not, [`common::missing_tool`] decides
/// between failing and skipping.
fn tools_or_skip() -> bool {
    match qemu::check_tools() {
        Ok(()) => true,
        Err(e) => {
            common::missing_tool(&format!("qemu capture test: {e}"));
            false
        }
    }
}

/// Check a capture against its ELF and return the checker's statistics.
fn check(cap: &Capture) -> CheckStats {
    let exec = &cap.execution;
    let (name, elf) = &exec.images[0];
    let mut images = ImageSet::new();
    images.add_elf(name, elf, None, None).unwrap();
    let stats = Checker::check_all(&images, exec.entry, exec.steps.iter().copied())
        .unwrap_or_else(|e| panic!("{}: {e}", exec.name));

    assert_eq!(stats.insns, cap.stats.retired, "{}", exec.name);
    assert!(cap.stats.retired > 10_000, "{}", exec.name);
    // The first instruction is the ELF entry point.
    let file = object::File::parse(&**elf).unwrap();
    assert_eq!(exec.entry, object::Object::entry(&file), "{}", exec.name);
    // One Syscall step per system call strace saw; the last step is exit_group.
    assert_eq!(
        stats.count(InsnClass::Syscall),
        cap.stats.syscalls,
        "{}",
        exec.name
    );
    assert!(
        matches!(
            exec.steps.last(),
            Some(Step::Branch {
                class: InsnClass::Syscall,
                ..
            })
        ),
        "{}: ends with {:?}",
        exec.name,
        exec.steps.last()
    );
    // Returns go back to their call sites.
    let rets = stats.count(InsnClass::Ret);
    assert!(
        stats.rets_to_caller as f64 >= 0.98 * rets as f64,
        "{}: {stats:?}",
        exec.name
    );
    println!(
        "{:<28} {:>9} insns {:>8} steps  lines {:>9} rep-iters {:>7}  cond {} jmp {} call {} \
         jmpind {} callind {} ret {} syscall {} interrupts {}",
        exec.name,
        stats.insns,
        stats.steps,
        cap.stats.traced,
        cap.stats.rep_iterations,
        stats.count(InsnClass::Cond),
        stats.count(InsnClass::Jmp),
        stats.count(InsnClass::Call),
        stats.count(InsnClass::JmpInd),
        stats.count(InsnClass::CallInd),
        rets,
        stats.count(InsnClass::Syscall),
        stats.interrupts,
    );
    stats
}

fn program(name: &str, stdin: &[u8]) -> Capture {
    let src = qemu::programs_dir().join(format!("{name}.c"));
    let cap = qemu::trace_c(&src, &[], stdin).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        cap.exit_code,
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&cap.stderr)
    );
    cap
}

fn stdout(cap: &Capture) -> String {
    String::from_utf8_lossy(&cap.stdout).into_owned()
}

#[test]
fn recursion() {
    if !tools_or_skip() {
        return;
    }
    let cap = program("recursion", b"18 40 2000 7\n");
    let out = stdout(&cap);
    assert!(out.contains("fib(18) = 2584\n"), "{out}");
    assert!(out.contains("ack(2,40) = 83\n"), "{out}");
    assert!(out.contains("queens(7) = 40\n"), "{out}");
    let stats = check(&cap);
    assert!(stats.max_depth > 20, "{stats:?}");
}

#[test]
fn callbacks() {
    if !tools_or_skip() {
        return;
    }
    let cap = program("callbacks", b"300 2 7\n");
    let out = stdout(&cap);
    assert!(out.contains("bsearch found 100\n"), "{out}");
    assert!(out.ends_with("atexit: note 989106\n"), "{out}");
    let stats = check(&cap);
    assert!(stats.count(InsnClass::CallInd) > 10_000, "{stats:?}");
}

#[test]
fn jumptable() {
    if !tools_or_skip() {
        return;
    }
    let cap = program("jumptable", b"100 60\n");
    let out = stdout(&cap);
    assert!(out.contains("collatz below 100: 99 chains"), "{out}");
    assert!(out.contains("lex: 240 words 60 numbers"), "{out}");
    let stats = check(&cap);
    // Every bytecode operation and every lexed character dispatches through a table.
    assert!(stats.count(InsnClass::JmpInd) > 20_000, "{stats:?}");
    // The dispatch jumps go to many different places.
    let mut targets: Vec<u64> = cap
        .execution
        .steps
        .iter()
        .filter_map(|s| match *s {
            Step::Branch {
                class: InsnClass::JmpInd,
                next,
                ..
            } => Some(next),
            _ => None,
        })
        .collect();
    targets.sort_unstable();
    targets.dedup();
    assert!(targets.len() > 20, "{} distinct targets", targets.len());
}

#[test]
fn strings_is_deterministic() {
    if !tools_or_skip() {
        return;
    }
    // Empty stdin: the program's built-in paragraph.
    let a = program("strings", b"");
    let out = stdout(&a);
    assert!(out.starts_with("560 words, 38 distinct"), "{out}");
    assert!(out.contains("the         |   80|b40eb21c|the\n"), "{out}");
    check(&a);
    // A second run is the same execution, instruction for instruction.
    let b = program("strings", b"");
    assert_eq!(a.execution.entry, b.execution.entry);
    assert!(a.execution.steps == b.execution.steps, "runs differ");
}

#[test]
fn signals() {
    if !tools_or_skip() {
        return;
    }
    let cap = program("signals", b"60000 8\n");
    let out = stdout(&cap);
    assert!(out.contains("usr1 10\n"), "{out}");
    assert!(out.contains("after store: signal 11\n"), "{out}");
    assert!(out.contains("after divide: signal 8, q 0\n"), "{out}");
    assert!(out.contains("faults 2\n"), "{out}");
    let stats = check(&cap);
    assert_eq!((cap.stats.signals, cap.stats.faults), (3, 2));
    // The two faults stop execution before the faulting instruction; the handler runs.
    assert_eq!(stats.interrupts, 2, "{stats:?}");
    assert!(cap.stats.rep_iterations > 100_000);
    // SIGUSR1 arrives when tgkill returns: that syscall continues in the handler.
    let (name, elf) = &cap.execution.images[0];
    let mut images = ImageSet::new();
    images.add_elf(name, elf, None, None).unwrap();
    let diverted = cap
        .execution
        .steps
        .iter()
        .filter(|s| {
            matches!(**s, Step::Branch { class: InsnClass::Syscall, ip, len, next, .. }
                if next != ip + len as u64)
        })
        .count();
    // tgkill into the handler, and rt_sigreturn back into raise.
    assert_eq!(diverted, 2);
}

/// Run a busybox applet natively (same output expected) and under qemu.
fn busybox(args: &[&str], stdin: &[u8]) -> Option<Capture> {
    if !tools_or_skip() {
        return None;
    }
    if !Path::new(BUSYBOX).exists() {
        common::missing_tool(&format!(
            "{BUSYBOX} not installed (apt-get install busybox-static)"
        ));
        return None;
    }
    let cap = qemu::trace(Path::new(BUSYBOX), args, stdin).unwrap();
    assert_eq!(cap.exit_code, Some(0), "{args:?}");
    let mut native = Command::new(BUSYBOX)
        .args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = native.stdin.take().unwrap();
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = pipe.write_all(&input);
    });
    let out = native.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(
        cap.stdout, out.stdout,
        "{args:?}: output differs from a native run"
    );
    check(&cap);
    Some(cap)
}

fn numbers() -> Vec<u8> {
    let mut x = 7u32;
    let mut s = String::new();
    for _ in 0..120 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        s += &format!("{}\n", (x >> 8) % 10_000);
    }
    s.into_bytes()
}

#[test]
fn busybox_sort() {
    busybox(&["sort", "-n"], &numbers());
}

#[test]
fn busybox_gzip() {
    let text = b"tracemill tracemill decodes traces; traces are packets.\n".repeat(40);
    if let Some(cap) = busybox(&["gzip", "-c"], &text) {
        assert_eq!(&cap.stdout[..2], &[0x1f, 0x8b]);
    }
}

#[test]
fn busybox_sha256sum() {
    busybox(&["sha256sum"], &numbers());
}

#[test]
fn busybox_awk() {
    busybox(
        &[
            "awk",
            "{ s += $1; n++ } $1 % 7 == 0 { k++ } END { print s, n, k }",
        ],
        &numbers(),
    );
}

#[test]
fn dynamic_and_missing_programs_are_refused_clearly() {
    if !tools_or_skip() {
        return;
    }
    let e = qemu::trace(Path::new("/no/such/program"), &[], b"").unwrap_err();
    assert!(e.to_string().contains("/no/such/program"), "{e}");
    // Anything from /bin that is dynamically linked.
    for p in ["/bin/ls", "/usr/bin/env", "/bin/cat"] {
        if Path::new(p).exists() {
            let e = qemu::trace(Path::new(p), &[], b"").unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("static"), "{msg}");
            break;
        }
    }
}
