//! Which trace format bytes are in, from their first PSB.
//!
//! RTIT's PSB is `C0` and eight `00` (RTIT reference 4.2.1); Intel PT's is `02 82`
//! eight times (SDM 36.4.2.17). Read as the other format, each decodes into garbage
//! rather than failing at once (`02` is an RTIT TNT, `C0` an Intel PT TNT-8 and `00` a
//! PAD), so a tool told the wrong format must look first. The earlier of the two PSBs
//! names the format. Only an Intel PT trace with a `C0` byte and eight PADs before its
//! first PSB could fool this; PT traces from perf start with a PSB.

use crate::stream::TraceStream;

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Intel RTIT (the Silvermont/Airmont Atom trace).
    Rtit,
    /// Intel PT (Intel Processor Trace).
    Pt,
}

impl TraceFormat {
    /// The name `--format` and `bundle.toml` use.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Rtit => "rtit",
            TraceFormat::Pt => "pt",
        }
    }
    /// The name people use.
    pub fn title(self) -> &'static str {
        match self {
            TraceFormat::Rtit => "RTIT",
            TraceFormat::Pt => "Intel PT",
        }
    }
}

/// The format the first PSB belongs to, and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sniffed {
    pub format: TraceFormat,
    pub psb: u64,
}

/// The format of the first PSB in `stream`, if it has one. Reads up to that PSB (twice:
/// one search per pattern, the second bounded by the first's hit).
pub fn sniff(stream: &TraceStream<'_>) -> Option<Sniffed> {
    let pt = crate::pt::sync::next_psb(stream, 0);
    let rtit = crate::rtit::sync::next_psb_before(stream, 0, pt.unwrap_or(u64::MAX));
    match (rtit, pt) {
        (Some(r), _) => Some(Sniffed {
            format: TraceFormat::Rtit,
            psb: r,
        }),
        (None, Some(p)) => Some(Sniffed {
            format: TraceFormat::Pt,
            psb: p,
        }),
        (None, None) => None,
    }
}

/// An error message when `stream` looks like another format than `expected`, naming
/// the format and the flag that reads it.
pub fn mismatch(stream: &TraceStream<'_>, expected: TraceFormat) -> Option<String> {
    let s = sniff(stream)?;
    (s.format != expected).then(|| {
        format!(
            "this looks like an {} trace, not {} (its first PSB, at offset {:#x}, is {}'s); \
             use --format {}",
            s.format.title(),
            expected.title(),
            s.psb,
            s.format.title(),
            s.format.name()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_psb_names_the_format() {
        let rtit = crate::rtit::packet::PSB_BYTES;
        let pt = crate::pt::packet::PSB_BYTES;
        let mut d = vec![0x55, 0x00];
        d.extend_from_slice(&pt);
        d.extend_from_slice(&rtit);
        let s = TraceStream::linear(&d);
        assert_eq!(
            sniff(&s),
            Some(Sniffed {
                format: TraceFormat::Pt,
                psb: 2
            })
        );
        let msg = mismatch(&s, TraceFormat::Rtit).unwrap();
        assert!(
            msg.contains("an Intel PT trace") && msg.contains("--format pt"),
            "{msg}"
        );
        assert_eq!(mismatch(&s, TraceFormat::Pt), None);

        let mut d = vec![0x02; 3];
        d.extend_from_slice(&rtit);
        d.extend_from_slice(&pt);
        let s = TraceStream::linear(&d);
        assert_eq!(sniff(&s).unwrap().format, TraceFormat::Rtit);
        let msg = mismatch(&s, TraceFormat::Pt).unwrap();
        assert!(
            msg.contains("an RTIT trace") && msg.contains("--format rtit"),
            "{msg}"
        );

        assert_eq!(sniff(&TraceStream::linear(&[0u8; 64])), None);
        assert_eq!(mismatch(&TraceStream::linear(&[]), TraceFormat::Pt), None);
    }
}
