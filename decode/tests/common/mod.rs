//! What the decode crate's tests share: for the two libipt suite tests (ptdump_suite.rs,
//! ptxed_suite.rs) the list of known failures and how a mismatch is told; for the Intel
//! PT rule tests (pt_resync.rs, pt_cut.rs) a decode made both ways. Each test binary
//! uses its part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::clock::PtTiming;
use tracemill_decode::pt::{Pt, PtConfig};
use tracemill_decode::stream::TraceStream;

/// `trace` (Intel PT, the default configuration) over `images`, decoded sequentially and
/// cut at every PSB, which must agree (`what` names it): the sequential decode.
pub fn decode_pt_both_ways(images: &ImageSet<'_>, trace: &[u8], what: &str) -> Decoded {
    let stream = TraceStream::linear(trace);
    let cfg = PtConfig::default();
    let input = Input::<Pt> {
        spaces: None,
        stream: &stream,
        images,
        cfg: cfg.clone(),
        timing: PtTiming::new(&cfg),
    };
    let seq = decode_all(&input, u64::MAX);
    let chunked = decode_all(&input, 1);
    assert_eq!(
        seq.rows.ip, chunked.rows.ip,
        "{what}: rows, cut at every PSB"
    );
    assert_eq!(
        seq.events, chunked.events,
        "{what}: events, cut at every PSB"
    );
    seq
}

/// `<name>` in the suite folder: `<expected output file> <reason>` a line, `#` comments.
/// Every entry must say why.
pub fn known_failures(suite: &Path, name: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(suite.join(name)).expect(name);
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (file, reason) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            assert!(
                !reason.trim().is_empty(),
                "known failure {file} gives no reason"
            );
            (file.to_string(), reason.trim().to_string())
        })
        .collect()
}

/// The first line where `want` and `have` differ, as a failure's reason; `None` if equal.
pub fn first_difference(want: &[String], have: &[String]) -> Option<String> {
    if want == have {
        return None;
    }
    let i = want.iter().zip(have).take_while(|(a, b)| a == b).count();
    Some(format!(
        "line {}: expected {:?}, got {:?}",
        i + 1,
        want.get(i).map(String::as_str).unwrap_or("<end>"),
        have.get(i).map(String::as_str).unwrap_or("<end>")
    ))
}
