//! The command line's flag groups shared by the subcommands (feature `cli`): clap's
//! readers of the library's typed options, [`TraceFormat`], [`PtOverrides`] and
//! [`Lookup`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tracemill_decode::pt::listing::ListingOptions;
use tracemill_input::manifest::TraceFormat;
use tracemill_input::perf::Lookup;
use tracemill_input::source::PtOverrides;

use super::parse_existing_dir;

/// `--trace-format`: the command line's names of [`TraceFormat`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// Intel RTIT (Silvermont/Airmont Atom trace), the packets of chapter 4.
    Rtit,
    /// Intel PT (the SDM's Processor Trace), as recorded by perf on every Intel server.
    Pt,
}

impl From<TraceFormatArg> for TraceFormat {
    fn from(f: TraceFormatArg) -> TraceFormat {
        match f {
            TraceFormatArg::Rtit => TraceFormat::Rtit,
            TraceFormatArg::Pt => TraceFormat::Pt,
        }
    }
}

/// The Intel PT processor and timing facts a trace does not carry, named as libipt's
/// ptdump and ptxed name them (for `dump`, `decode` and `ingest`; over a bundle's `[pt]`).
#[derive(Args, Debug)]
#[command(next_help_heading = "Intel PT: the processor's facts (as ptxed's options)")]
pub struct PtFactsFlags {
    /// The processor, F/M[/S] (selects errata), or none.
    #[arg(long, value_name = "F/M[/S]")]
    pub cpu: Option<String>,
    /// IA32_RTIT_CTL.MTCFreq.
    #[arg(long, value_name = "N")]
    pub mtc_freq: Option<String>,
    /// The maximum non-turbo ratio (MSR_PLATFORM_INFO[15:8]).
    #[arg(long, value_name = "N")]
    pub nom_freq: Option<String>,
    /// CPUID.15H:EAX (TSC:CTC ratio denominator).
    #[arg(long = "cpuid-0x15.eax", value_name = "N")]
    pub cpuid_0x15_eax: Option<String>,
    /// CPUID.15H:EBX (TSC:CTC ratio numerator).
    #[arg(long = "cpuid-0x15.ebx", value_name = "N")]
    pub cpuid_0x15_ebx: Option<String>,
}

impl PtFactsFlags {
    /// The facts given, as ptdump's option words.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        for (v, word) in [
            (&self.cpu, "--cpu"),
            (&self.mtc_freq, "--mtc-freq"),
            (&self.nom_freq, "--nom-freq"),
            (&self.cpuid_0x15_eax, "--cpuid-0x15.eax"),
            (&self.cpuid_0x15_ebx, "--cpuid-0x15.ebx"),
        ] {
            if let Some(v) = v {
                w.extend([word.to_string(), v.clone()]);
            }
        }
        w
    }

    /// The facts given, each value read as ptdump reads it: the library's
    /// [`PtOverrides`].
    pub fn overrides(&self) -> anyhow::Result<PtOverrides> {
        let (_, given) =
            ListingOptions::from_ptdump_args(&self.words()).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(PtOverrides {
            cpu: self.cpu.as_ref().map(|c| (c != "none").then(|| c.clone())),
            mtc_freq: self.mtc_freq.is_some().then_some(given.mtc_freq),
            nom_freq: self.nom_freq.is_some().then_some(given.nom_freq),
            tsc_ctc_ratio_d: self
                .cpuid_0x15_eax
                .is_some()
                .then_some(given.tsc_ctc_ratio_d),
            tsc_ctc_ratio_n: self
                .cpuid_0x15_ebx
                .is_some()
                .then_some(given.tsc_ctc_ratio_n),
        })
    }
}

/// Where a perf.data's binaries are, as perf's options name them (`decode`, `ingest`).
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "perf.data: where its binaries are (as perf's options)")]
pub struct PerfFlags {
    /// perf.data: look for the recorded binaries under DIR first (DIR + the recorded
    /// path), as perf's --symfs.
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub symfs: Option<PathBuf>,
    /// perf.data: the build-id cache to look for binaries in by build-id [default:
    /// ~/.debug], as perf's --buildid-dir.
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub buildid_dir: Option<PathBuf>,
    /// perf.data: the kernel's ELF image (its code at its own addresses), for traces of
    /// kernel code, as perf's --vmlinux.
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// perf.data: a copy of /proc/kcore taken with the recording (the kernel's text as it
    /// ran, modules included), or the kcore_dir `perf record --kcore` writes (a recording
    /// made so, given as its directory, uses its own).
    #[arg(long, value_name = "FILE|DIR")]
    pub kcore: Option<PathBuf>,
}

impl PerfFlags {
    /// The library's [`Lookup`] (not confined: the caller's input).
    pub fn lookup(&self) -> Lookup {
        Lookup {
            symfs: self.symfs.clone(),
            buildid_dir: self.buildid_dir.clone(),
            vmlinux: self.vmlinux.iter().cloned().collect(),
            kcore: self.kcore.iter().cloned().collect(),
            confine: None,
        }
    }
}
