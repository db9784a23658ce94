//! The processor a trace was recorded on, and the Intel PT errata it implies.
//!
//! Errata are named as in Intel's specification updates and in libipt (`pt_errata`);
//! which processors have which is a table of family/model pairs taken from the same
//! sources. Only SKD007 and SKZ84 change how bytes parse ([`super::packet::parse`]) and
//! SKL168 how time is calibrated ([`super::time::Calibration`]); the rest matter to the
//! instruction-flow decoder and are carried for it.

use std::fmt;
use std::str::FromStr;

/// Family, model and stepping, as CPUID reports them (model with the extended model
/// folded in: 6/85 is family 6, model 0x55).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cpu {
    pub family: u16,
    pub model: u8,
    pub stepping: u8,
}

/// A `--cpu` / `cpu =` value that is not `F/M[/S]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadCpu(pub String);

impl fmt::Display for BadCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu must be given as family/model[/stepping], not {:?}",
            self.0
        )
    }
}

impl std::error::Error for BadCpu {}

/// A number as C's `strtol(s, _, 0)` reads it (`0x` hex, leading `0` octal, else
/// decimal), so that `--cpu` takes what ptdump takes.
pub(crate) fn parse_c_number(s: &str) -> Option<u64> {
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

impl FromStr for Cpu {
    type Err = BadCpu;
    fn from_str(s: &str) -> Result<Cpu, BadCpu> {
        let bad = || BadCpu(s.to_string());
        let mut parts = s.split('/');
        let mut next = |max: u64| -> Result<Option<u64>, BadCpu> {
            match parts.next() {
                None => Ok(None),
                Some(p) => match parse_c_number(p) {
                    Some(v) if v <= max => Ok(Some(v)),
                    _ => Err(bad()),
                },
            }
        };
        let family = next(u16::MAX as u64)?.ok_or_else(bad)?;
        let model = next(u8::MAX as u64)?.ok_or_else(bad)?;
        let stepping = next(u8::MAX as u64)?.unwrap_or(0);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Cpu {
            family: family as u16,
            model: model as u8,
            stepping: stepping as u8,
        })
    }
}

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.family, self.model, self.stepping)
    }
}

/// Intel PT errata a decoder works around (titles from the specification updates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Errata {
    /// BDM70: PSB+ may contain unexpected packets (a FUP and MODE.Exec in the PSB+
    /// before a TIP.PGE).
    pub bdm70: bool,
    /// BDM64: an incorrect packet may precede a TSX abort.
    pub bdm64: bool,
    /// SKD007: an OVF may be sent after the first byte of a multi-byte CYC, in place of
    /// its other bytes.
    pub skd007: bool,
    /// SKD022: a VM entry that clears TraceEn may generate a FUP (before the TIP.PGD).
    pub skd022: bool,
    /// SKD010: the FUP after an OVF may be dropped.
    pub skd010: bool,
    /// SKL014: a TIP.PGD for a direct branch leaving the IP filter may lack its
    /// target IP.
    pub skl014: bool,
    /// APL12: an OVF may be followed by an unexpected FUP (while FilterEn is clear).
    pub apl12: bool,
    /// APL11: an OVF may be followed by a TIP.PGD.
    pub apl11: bool,
    /// SKL168: CYC packets just before a PSB may be dropped (calibration must not use
    /// the first MTC after a PSB when that looks so).
    pub skl168: bool,
    /// SKZ84: VMX TSC scaling or offsetting corrupts TMA packets.
    pub skz84: bool,
}

/// No errata table entry for the processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownCpu(pub Cpu);

impl fmt::Display for UnknownCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no Intel PT errata known for cpu {}/{}",
            self.0.family, self.0.model
        )
    }
}

impl std::error::Error for UnknownCpu {}

/// Which errata a group of processors has, and the group's family/model pairs.
struct Group {
    models: &'static [(u16, u8)],
    errata: Errata,
}

const NONE: Errata = Errata {
    bdm70: false,
    bdm64: false,
    skd007: false,
    skd022: false,
    skd010: false,
    skl014: false,
    apl12: false,
    apl11: false,
    skl168: false,
    skz84: false,
};

/// The processors with Intel PT, by the errata their specification updates list (the
/// same table libipt's `pt_cpu_errata` holds).
const GROUPS: &[Group] = &[
    // Broadwell.
    Group {
        models: &[(6, 0x3d), (6, 0x47), (6, 0x4f), (6, 0x56)],
        errata: Errata {
            bdm70: true,
            bdm64: true,
            ..NONE
        },
    },
    // Skylake, Kaby Lake, Coffee Lake, Comet Lake client.
    Group {
        models: &[
            (6, 0x4e),
            (6, 0x5e),
            (6, 0x8e),
            (6, 0x9e),
            (6, 0xa5),
            (6, 0xa6),
        ],
        errata: Errata {
            bdm70: true,
            skd007: true,
            skd022: true,
            skd010: true,
            skl014: true,
            skl168: true,
            ..NONE
        },
    },
    // Skylake and Ice Lake server.
    Group {
        models: &[(6, 0x55), (6, 0x6a), (6, 0x6c)],
        errata: Errata {
            bdm70: true,
            skl014: true,
            skd022: true,
            skz84: true,
            ..NONE
        },
    },
    // Sapphire Rapids, Emerald Rapids, Granite Rapids.
    Group {
        models: &[(6, 0x8f), (6, 0xcf), (6, 0xad), (6, 0xae)],
        errata: Errata {
            bdm70: true,
            skd022: true,
            skz84: true,
            ..NONE
        },
    },
    // Cannon Lake, Ice Lake client, Tiger Lake, Rocket Lake.
    Group {
        models: &[
            (6, 0x66),
            (6, 0x7d),
            (6, 0x7e),
            (6, 0x8c),
            (6, 0x8d),
            (6, 0xa7),
            (6, 0xa8),
        ],
        errata: Errata {
            bdm70: true,
            skl014: true,
            skd022: true,
            ..NONE
        },
    },
    // Alder Lake, Raptor Lake, Meteor Lake, Arrow Lake, Lunar Lake, Panther Lake, and
    // family 18 (Nova Lake).
    Group {
        models: &[
            (6, 0x97),
            (6, 0x9a),
            (6, 0xba),
            (6, 0xb7),
            (6, 0xbf),
            (6, 0xc5),
            (6, 0xc6),
            (6, 0xb5),
            (6, 0xaa),
            (6, 0xac),
            (6, 0xbd),
            (6, 0xcc),
            (6, 0xd5),
            (0x12, 0x01),
            (0x12, 0x03),
        ],
        errata: Errata {
            bdm70: true,
            skd022: true,
            apl11: true,
            ..NONE
        },
    },
    // Family 19 (Diamond Rapids).
    Group {
        models: &[(0x13, 0x01)],
        errata: Errata {
            bdm70: true,
            skd022: true,
            skz84: true,
            ..NONE
        },
    },
    // Apollo Lake, Denverton.
    Group {
        models: &[(6, 0x5c), (6, 0x5f)],
        errata: Errata {
            apl12: true,
            apl11: true,
            ..NONE
        },
    },
    // Goldmont Plus, Tremont and later Atom cores.
    Group {
        models: &[
            (6, 0x7a),
            (6, 0x86),
            (6, 0x96),
            (6, 0x9c),
            (6, 0xb6),
            (6, 0xaf),
            (6, 0xdd),
        ],
        errata: Errata {
            apl11: true,
            ..NONE
        },
    },
];

impl Errata {
    /// The errata of `cpu`; an error for a processor the table does not know (the
    /// caller may go on without errata, as ptdump does after saying so).
    pub fn for_cpu(cpu: &Cpu) -> Result<Errata, UnknownCpu> {
        GROUPS
            .iter()
            .find(|g| g.models.contains(&(cpu.family, cpu.model)))
            .map(|g| g.errata)
            .ok_or(UnknownCpu(*cpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_parses_like_strtol_base_0() {
        let c = |s: &str| s.parse::<Cpu>();
        assert_eq!(
            c("6/85"),
            Ok(Cpu {
                family: 6,
                model: 85,
                stepping: 0
            })
        );
        assert_eq!(c("0x6/0x55/4").unwrap().model, 0x55);
        assert_eq!(c("6/0125").unwrap().model, 0o125);
        assert!(c("6").is_err());
        assert!(c("6/").is_err());
        assert!(c("6/300").is_err());
        assert!(c("6/85/4/1").is_err());
        assert!(c("x/1").is_err());
    }

    #[test]
    fn errata_by_model() {
        let e = |f, m| {
            Errata::for_cpu(&Cpu {
                family: f,
                model: m,
                stepping: 0,
            })
        };
        let skx = e(6, 0x55).unwrap();
        assert!(skx.skz84 && skx.bdm70 && !skx.skd007);
        let skl = e(6, 0x5e).unwrap();
        assert!(skl.skd007 && skl.skl168 && !skl.skz84);
        assert!(e(6, 0x5c).unwrap().apl12);
        assert!(e(0x13, 1).unwrap().skz84);
        assert!(e(0, 0).is_err());
        assert!(e(6, 0x2a).is_err());
    }
}
