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

/// The format of the first PSB in `stream`, if it has one. Reads a little past that PSB:
/// both patterns are searched a window of [`SNIFF_STEP`] bytes at a time, so neither
/// search runs to the end of a trace that has none of its PSBs. (It did: the Intel PT
/// search went through the whole of every RTIT trace first, 0.17 s and every page of a
/// 1 GiB mapped trace resident at once, before the decode had read anything.)
pub fn sniff(stream: &TraceStream<'_>) -> Option<Sniffed> {
    let len = stream.len();
    let mut at = 0u64;
    while at < len {
        let to = at.saturating_add(SNIFF_STEP).min(len);
        // Each finds PSBs that start in the window (reading a PSB's length past it); an
        // Intel PT PSB wins only when it starts before the first RTIT one.
        let rtit = crate::rtit::sync::next_psb_before(stream, at, to);
        let pt = crate::pt::sync::next_psb_before(stream, at, rtit.unwrap_or(to));
        match (pt, rtit) {
            (Some(p), _) => {
                return Some(Sniffed {
                    format: TraceFormat::Pt,
                    psb: p,
                })
            }
            (None, Some(r)) => {
                return Some(Sniffed {
                    format: TraceFormat::Rtit,
                    psb: r,
                })
            }
            (None, None) => at = to,
        }
    }
    None
}

/// The window [`sniff`] searches at a time.
pub const SNIFF_STEP: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// The windowed search finds what one search over the whole stream finds: a PSB
    /// straddling a window's end, one in a later window, the earlier of the two formats
    /// when both are in one window, and none in a stream without PSBs.
    #[test]
    fn sniff_searches_in_windows_and_finds_the_first_psb_of_either_format() {
        let rtit = crate::rtit::packet::PSB_BYTES;
        let pt = crate::pt::packet::PSB_BYTES;
        let step = SNIFF_STEP as usize;
        let place = |parts: &[(usize, &[u8])], len: usize| {
            let mut d = vec![0x55u8; len];
            for (at, bytes) in parts {
                d[*at..*at + bytes.len()].copy_from_slice(bytes);
            }
            d
        };
        let first = |parts: &[(usize, &[u8])], len: usize| {
            sniff(&TraceStream::linear(&place(parts, len))).map(|f| (f.format, f.psb as usize))
        };
        use TraceFormat::{Pt, Rtit};
        // Straddling the first window's end.
        assert_eq!(
            first(&[(step - 5, &rtit)], 2 * step),
            Some((Rtit, step - 5))
        );
        assert_eq!(first(&[(step - 3, &pt)], 2 * step), Some((Pt, step - 3)));
        // In the third window; both formats in one window: the earlier wins.
        let (at40, at100) = (2 * step + 40, 2 * step + 100);
        assert_eq!(
            first(&[(at100, &pt), (at40, &rtit)], 3 * step + 7),
            Some((Rtit, at40))
        );
        assert_eq!(
            first(&[(at100, &rtit), (at40, &pt)], 3 * step + 7),
            Some((Pt, at40))
        );
        // An RTIT PSB in the first window and a PT one in a later one.
        let d = place(&[(10, &rtit), (step + 10, &pt)], 2 * step);
        assert_eq!(
            sniff(&TraceStream::linear(&d)).unwrap().format,
            TraceFormat::Rtit
        );
        assert_eq!(
            sniff(&TraceStream::linear(&vec![0x55u8; 2 * step + 1])),
            None
        );
        assert_eq!(sniff(&TraceStream::linear(&[])), None);
    }

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

        let mut d = vec![0x02; 3];
        d.extend_from_slice(&rtit);
        d.extend_from_slice(&pt);
        let s = TraceStream::linear(&d);
        assert_eq!(sniff(&s).unwrap().format, TraceFormat::Rtit);

        assert_eq!(sniff(&TraceStream::linear(&[0u8; 64])), None);
    }
}
