//! The targets on committed inputs (`cargo test` in `fuzz/`; the workspace's
//! `datasets/tests/fuzz_regressions.rs` replays the corpora and findings).

use std::path::Path;

use crate::targets::{pt_stitch_diff, PtCase, BREAKS_TAG};

fn corpus(target: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `pt_stitch_diff` with breaks: a seed with [`BREAKS_TAG`] and a selector appended has
/// bytes lost before some of its PSBs, and passes the target's checks (chunks agree, one
/// loss reported at each break); without the trailer it reads as before, with none.
#[test]
fn pt_stitch_diff_with_breaks() {
    let seed = corpus("pt_stitch_diff", "jumptable-retc-psb");
    let plain = PtCase::parse_with_breaks(&seed).expect("a PtCase");
    assert!(plain.breaks.is_empty());
    assert_eq!(plain.trace, PtCase::parse(&seed).unwrap().trace);
    // Every PSB after the prologue's, every second from the first, every third from the
    // second; Missing, Overwritten, Truncated, and the three in turn.
    for s in [0x00, 0x21, 0x4a, 0xe0] {
        let mut data = seed.clone();
        data.extend_from_slice(BREAKS_TAG);
        data.push(s);
        let case = PtCase::parse_with_breaks(&data).expect("a PtCase");
        assert_eq!(
            case.trace, plain.trace,
            "selector {s:#x}: the trailer is cut off"
        );
        assert!(!case.breaks.is_empty(), "selector {s:#x}: no break");
        assert!(case.breaks.iter().all(|b| b.at > 0));
        pt_stitch_diff(&data);
    }
}
