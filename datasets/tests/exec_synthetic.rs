//! Synthetic walks over real binaries: reproducible, consistent with the code, fast.

use std::hash::{Hash, Hasher};

use tracemill_datasets::exec::qemu;
use tracemill_datasets::exec::steps::{CheckStats, Checker};
use tracemill_datasets::exec::synthetic::{Code, EntrySource, WalkConfig};
use tracemill_datasets::exec::Step;
use tracemill_decode::insn::InsnClass;

mod common;

/// Debian's busybox-static (stripped, 2 MB of real code), as committed with the samples.
fn busybox() -> Option<Vec<u8>> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("samples/busybox-sort/images/busybox");
    Some(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

fn digest(steps: impl Iterator<Item = Step>) -> (u64, u64) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut n = 0;
    for s in steps {
        format!("{s:?}").hash(&mut h);
        n += 1;
    }
    (n, h.finish())
}

fn check(code: &Code<'_>, cfg: &WalkConfig) -> CheckStats {
    let walk = code.walk(cfg);
    let mut checker = Checker::new(code.images(), walk.entry());
    for s in walk {
        checker
            .step(&s)
            .unwrap_or_else(|e| panic!("{} seed {}: {e}", code.name(), cfg.seed));
    }
    checker.stats().clone()
}

#[test]
fn busybox_walks_are_reproducible() {
    let Some(elf) = busybox() else { return };
    let code = Code::from_elf("busybox", &elf).unwrap();
    // busybox is stripped: the entries come from call targets.
    assert_eq!(code.entry_source(), EntrySource::CallTargets);
    assert!(code.entries().len() > 1000, "{}", code.entries().len());
    let cfg = WalkConfig::new(42, 200_000);
    let a = digest(code.walk(&cfg));
    let b = digest(code.walk(&cfg));
    assert_eq!(a, b);
    assert_eq!(a.0, 200_000);
    let c = digest(code.walk(&WalkConfig::new(43, 200_000)));
    assert_ne!(a.1, c.1);
}

#[test]
fn busybox_walk_of_a_million_steps_is_consistent() {
    let Some(elf) = busybox() else { return };
    let code = Code::from_elf("busybox", &elf).unwrap();
    let cfg = WalkConfig::new(7, 1_000_000);
    let stats = check(&code, &cfg);
    assert_eq!(stats.steps, 1_000_000);
    let rets = stats.count(InsnClass::Ret);
    println!(
        "busybox walk: {} insns, cond {} jmp {} call {} jmpind {} callind {} ret {} \
         (to caller {}, elsewhere {}, unmatched {}) syscall {} far {} interrupts {} max depth {}",
        stats.insns,
        stats.count(InsnClass::Cond),
        stats.count(InsnClass::Jmp),
        stats.count(InsnClass::Call),
        stats.count(InsnClass::JmpInd),
        stats.count(InsnClass::CallInd),
        rets,
        stats.rets_to_caller,
        stats.rets_elsewhere,
        stats.rets_unmatched,
        stats.count(InsnClass::Syscall),
        stats.count(InsnClass::Far),
        stats.interrupts,
        stats.max_depth,
    );
    // Every kind of step shows up, returns mostly go home, and a few do not.
    for class in [
        InsnClass::Cond,
        InsnClass::Jmp,
        InsnClass::Call,
        InsnClass::JmpInd,
        InsnClass::CallInd,
        InsnClass::Ret,
    ] {
        assert!(stats.count(class) > 1000, "{class:?}: {stats:?}");
    }
    assert!(stats.interrupts > 100, "{stats:?}");
    assert!(stats.rets_to_caller as f64 > 0.9 * rets as f64, "{stats:?}");
    assert!(
        stats.rets_elsewhere + stats.rets_unmatched > 100,
        "{stats:?}"
    );
}

#[test]
fn walk_over_a_sample_program_uses_its_symbols() {
    if !qemu::gcc_available() {
        common::missing_tool("gcc not installed (apt-get install gcc)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("callbacks");
    qemu::compile_c(&qemu::programs_dir().join("callbacks.c"), &exe).unwrap();
    let elf = std::fs::read(&exe).unwrap();
    let code = Code::from_elf("callbacks", &elf).unwrap();
    assert_eq!(code.entry_source(), EntrySource::Symbols);
    let mut cfg = WalkConfig::new(3, 300_000);
    cfg.interrupt_rate = 0.01;
    cfg.wild_ret_rate = 0.05;
    let stats = check(&code, &cfg);
    assert!(stats.interrupts > 1000, "{stats:?}");
    // An instruction budget ends the walk just past it.
    cfg.max_steps = u64::MAX;
    cfg.max_insns = 123_456;
    let mut walk = code.walk(&cfg);
    let n: u64 = walk.by_ref().map(|s| s.insns() as u64).sum();
    assert!((123_456..123_456 + 10_000).contains(&n), "{n}");
    // The small-walk convenience is the same walk.
    let mut small = WalkConfig::new(5, 1000);
    small.max_insns = u64::MAX;
    let exec = code.execution(&small);
    assert_eq!(exec.steps, code.walk(&small).collect::<Vec<_>>());
    assert_eq!(exec.images[0].1, elf);
}
