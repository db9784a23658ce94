//! What a generated Intel PT recording holds: its CPUs' stretches, processes, execs,
//! kernel modules and `perf record` options.

use tracemill_perfdata::intel_pt::PerfClock;
use tracemill_perfdata::BuildId;

/// A stretch of one CPU in [`intel_pt_two_threads`]: the thread that runs there from
/// `switch_in` to `switch_out` and the Intel PT bytes the CPU wrote meanwhile. A CPU may
/// have several stretches (one thread after another, in time order): its AUX data is
/// theirs, one after the other.
#[derive(Clone, Debug)]
pub struct CpuStream {
    pub cpu: u32,
    pub tid: u32,
    pub pt: Vec<u8>,
    /// perf times (ns) of the switch in and out: the stream's TSC packets should fall
    /// between them (`PerfClock::perf_time_to_tsc`), after the process's sideband.
    pub switch_in: u64,
    pub switch_out: u64,
}

/// The program, its process and the recording settings of [`intel_pt_two_threads`].
#[derive(Clone, Debug)]
pub struct PtRecording {
    /// `/sys/bus/event_source/devices/intel_pt/type` of the recording machine.
    pub pmu_type: u32,
    /// The event's config: IA32_RTIT_CTL's bits (perf's default `intel_pt//` is
    /// 0x300e601: pt, mtc, tsc, branch, mtc_period 3, psb_period 3).
    pub config: u64,
    pub clock: PerfClock,
    /// TSC:CTC ratio and nominal ratio, as perf stores them.
    pub tsc_ctc_ratio: (u32, u32),
    pub max_nonturbo_ratio: u32,
    /// The binary: path as mapped, build-id, load address, mapped length, file offset.
    pub path: Vec<u8>,
    pub build_id: BuildId,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub comm: Vec<u8>,
    pub pid: u32,
    /// perf time (ns) of the first record; the process's sideband follows 1 µs apart,
    /// each CPU's records at its `switch_in` and `switch_out`.
    pub start_time: u64,
    pub cpus: Vec<CpuStream>,
    /// `perf record -z` at this zstd level: the sideband in COMPRESSED records.
    pub compress: Option<i32>,
    /// Other processes, each one thread (its tid is its pid): a `CpuStream` whose `tid`
    /// is one of their pids runs in that process.
    pub processes: Vec<PtProcess>,
    /// Programs processes exec into during the recording.
    pub execs: Vec<PtExec>,
    /// Kernel modules loaded, as `perf record` synthesizes them when it starts: an MMAP2
    /// of the kernel (pid -1) naming the module's `.ko` file.
    pub modules: Vec<PtImage>,
    /// The most AUX data one AUXTRACE record holds: a stretch's trace cut into buffers of
    /// this many bytes at any byte, as perf cuts it (it reads the AUX ring where its head
    /// is when it wakes, inside a packet as often as not). `None`: one buffer a stretch.
    pub aux_buffer: Option<usize>,
    /// `perf record -S` (snapshot mode) with this snapshot size: the AUX area is
    /// overwritten in a ring, and a snapshot at the end of each `aux_buffer` bytes holds
    /// only its last this many bytes (perf writes them at their AUX offset, so the bytes
    /// before are a gap: overwritten). Needs `aux_buffer`.
    pub snapshot: Option<usize>,
    /// Sideband records (LOST) and samples (LOST_SAMPLES) perf dropped: one record of each
    /// with these counts, before the threads exit.
    pub lost: Option<(u64, u64)>,
    /// `perf record --per-thread`: an AUX area per thread (its stretches' data one after
    /// the other, whatever their CPU; AUXTRACE records name the thread, CPU -1), and no
    /// context switch recorded (`have_sched_switch` 0).
    pub per_thread: bool,
    /// `perf record -e intel_pt//` (not `//u`): the kernel is traced too (both events
    /// without `exclude_kernel`), and the streams are encoded with every CPL traced.
    pub kernel: bool,
}

/// A binary as mapped: path, build-id, load address, mapped length, file offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtImage {
    pub path: Vec<u8>,
    pub build_id: BuildId,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
}

impl PtImage {
    /// The static ELF at `path`: its build-id and first executable segment, mapped at its
    /// own address.
    pub fn for_elf(path: &std::path::Path) -> Result<PtImage, String> {
        use object::{Object, ObjectSegment, SegmentFlags};
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let elf = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let id = elf
            .build_id()
            .ok()
            .flatten()
            .and_then(BuildId::new)
            .ok_or_else(|| format!("{}: no build-id of at most 20 bytes", path.display()))?;
        let text = elf
            .segments()
            .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0))
            .ok_or_else(|| format!("{}: no executable segment", path.display()))?;
        let (offset, _) = text.file_range();
        Ok(PtImage {
            path: path.as_os_str().as_encoded_bytes().to_vec(),
            build_id: id,
            addr: text.address(),
            len: text.size(),
            pgoff: offset,
        })
    }

    /// The name perf gives a process running it (COMM: the file name, 15 bytes at most).
    pub fn comm(&self) -> &[u8] {
        let name = self.path.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        &name[..name.len().min(15)]
    }
}

/// A process of [`PtRecording::processes`]: from perf time `start`, forked from `parent`
/// (a FORK record: it has the parent's mappings) and/or running `image` (COMM with the
/// exec flag and the image's MMAP2, after the FORK if any).
#[derive(Clone, Debug)]
pub struct PtProcess {
    pub pid: u32,
    pub parent: Option<u32>,
    pub image: Option<PtImage>,
    pub start: u64,
}

/// Process `pid` execs `image` at perf time `time` (COMM with the exec flag, then the
/// image's MMAP2 1 ns later): its earlier mappings are gone.
#[derive(Clone, Debug)]
pub struct PtExec {
    pub pid: u32,
    pub time: u64,
    pub image: PtImage,
}

impl PtRecording {
    /// The CPUs of `cpus`, each once, in order of first appearance (their AUX areas).
    pub fn cpu_list(&self) -> Vec<u32> {
        let mut v: Vec<u32> = Vec::new();
        for c in &self.cpus {
            if !v.contains(&c.cpu) {
                v.push(c.cpu);
            }
        }
        v
    }

    /// The threads of `cpus`, each once, in order of first appearance (the first is the
    /// process's main thread).
    pub fn tids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = Vec::new();
        for c in &self.cpus {
            if !v.contains(&c.tid) {
                v.push(c.tid);
            }
        }
        v
    }

    /// The process of thread `tid`: one of `processes` (whose thread is its pid), or the
    /// recording's own.
    pub fn pid_of(&self, tid: u32) -> u32 {
        if self.processes.iter().any(|p| p.pid == tid) {
            tid
        } else {
            self.pid
        }
    }

    /// A recording of the static ELF at `path` (read for its build-id and its first
    /// executable segment, mapped at its own address), process `pid` named after the
    /// file, on a 2 GHz TSC (perf time = TSC / 2 + 1 s), with perf's default config.
    pub fn for_elf(
        path: &std::path::Path,
        pid: u32,
        cpus: Vec<CpuStream>,
    ) -> Result<PtRecording, String> {
        let im = PtImage::for_elf(path)?;
        let comm = im.comm().to_vec();
        let PtImage {
            path,
            build_id: id,
            addr,
            len,
            pgoff: offset,
        } = im;
        Ok(PtRecording {
            pmu_type: 8,
            config: 0x300e601,
            clock: PerfClock {
                time_shift: 10,
                time_mult: 512,
                time_zero: 1_000_000_000,
                short: None,
            },
            tsc_ctc_ratio: (84, 2),
            max_nonturbo_ratio: 20,
            path,
            build_id: id,
            addr,
            len,
            pgoff: offset,
            comm,
            pid,
            start_time: 1_000_000_000 + 1_000_000,
            cpus,
            compress: None,
            processes: Vec::new(),
            execs: Vec::new(),
            modules: Vec::new(),
            aux_buffer: None,
            snapshot: None,
            lost: None,
            per_thread: false,
            kernel: false,
        })
    }
}
