//! The spec's own examples, built by hand as executions and run through the model.
//!
//! - [`table3`]: the filtered trace of Table 3 (2.5.1): IP filter 0x100..0x110, far jumps
//!   and a fault in and out of the region;
//! - [`figure6`], [`figure7`]: return compression without and with nested calls
//!   (4.2.3.2);
//! - [`psb_worked_example`]: the 3.3.9 example (Pkt_Cnt 0xffc, Pkt_Mask 1, a far transfer:
//!   FUP.FAR, PSB, TIP, and Pkt_Cnt ends at 0xE).
//!
//! Each returns the code image, the execution and the configuration, so the scenarios can
//! also be written out as bundles and decoded.

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::decode_insn;
use tracemill_decode::rtit::config::ctl;

use crate::exec::Step;
use crate::model::{Model, ModelOptions, Output};

/// A hand-made execution.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    /// What the spec says it shows.
    pub about: &'static str,
    /// Raw code at `base`.
    pub code: Vec<u8>,
    pub base: u64,
    pub entry: u64,
    pub steps: Vec<Step>,
    pub options: ModelOptions,
}

impl Scenario {
    /// Run the model over the scenario, recording packets.
    pub fn run(&self) -> Output {
        let mut set = ImageSet::new();
        set.add_raw(self.name, &self.code, self.base, None);
        let mut o = self.options.clone();
        o.record_packets = true;
        Model::new(o, &set).run(self.entry, self.steps.clone())
    }
}

/// Builds steps by walking code: "run straight to the branch at X, which goes to Y".
struct Walker<'a> {
    code: &'a [u8],
    base: u64,
    at: u64,
    steps: Vec<Step>,
}

impl<'a> Walker<'a> {
    fn new(code: &'a [u8], base: u64, entry: u64) -> Self {
        Walker {
            code,
            base,
            at: entry,
            steps: Vec::new(),
        }
    }
    fn insn(&self, ip: u64) -> tracemill_decode::insn::InsnInfo {
        decode_insn(&self.code[(ip - self.base) as usize..], ip).expect("scenario code decodes")
    }
    /// Retire instructions up to and including the first branch; it goes to `next`.
    fn branch_to(&mut self, next: u64) -> &mut Self {
        let mut n = 0;
        loop {
            let i = self.insn(self.at);
            n += 1;
            if i.class.is_branch() {
                self.steps.push(Step::Branch {
                    ip: i.ip,
                    len: i.len,
                    class: i.class,
                    target: i.target,
                    next,
                    insns: n,
                });
                self.at = next;
                return self;
            }
            self.at = i.nlip();
        }
    }
    /// Retire `n` instructions, then an interrupt or fault stops execution before the next
    /// one (or, for a fault, at the faulting one: `at`); it resumes at `resume`.
    fn interrupt(&mut self, n: u32, at: u64, resume: u64) -> &mut Self {
        self.steps.push(Step::Interrupt {
            insns: n,
            at,
            resume,
        });
        self.at = resume;
        self
    }
}

fn assemble(base: u64, f: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>) -> Vec<u8> {
    let mut a = CodeAssembler::new(64).expect("64-bit assembler");
    f(&mut a).expect("scenario assembles");
    a.assemble_options(base, BlockEncoderOptions::NONE)
        .expect("scenario assembles")
        .inner
        .code_buffer
}

fn base_ctl() -> u64 {
    ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::DEST
}

fn quiet(ctl: u64, seed: u64) -> ModelOptions {
    ModelOptions {
        ctl,
        seed,
        e6: false,
        e7: false,
        lazy_clear_max: 0,
        ..ModelOptions::default()
    }
}

/// Table 3: "If RTIT was programmed to trace all CPLs and the address filters were
/// restricting the IP range to instruction between 0x100-0x110":
///
/// | step | CLIP  | instruction                      | RTIT output                  |
/// |------|-------|----------------------------------|------------------------------|
/// | 1    | 0x020 | JMP to 102                       | FUP.PGE(102)                 |
/// | 3    | 0x102 | far JMP to 983                   | FUP.PGD(105), TIP(983)       |
/// | 4    | 0x983 | far JMP to 10E                   | FUP.PGE(10E)                 |
/// | 5    | 0x10E | divide by 0, handler at 345      | FUP.PGD(10E), TIP(345)       |
/// | 6-10 | 0x345 | handler ... IRET to 113          | nothing (113 is outside)     |
///
/// (The table's step 2, an XOR at 0x100 that ends at 0x102, cannot be reached from a jump
/// to 0x102; it produces nothing either way and is left out.)
pub fn table3() -> Scenario {
    let base = 0x0;
    let mut code = vec![0x90u8; 0x1000];
    let put = |code: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        code[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(&mut code, 0x20, &[0xE9, 0xDD, 0x00, 0x00, 0x00]); // jmp 0x102 (0x25 + 0xDD)
    put(&mut code, 0x102, &[0xFF, 0x68, 0x00]); // jmp far [rax+0]: NLIP 0x105
    put(&mut code, 0x983, &[0xFF, 0x68, 0x00]); // jmp far [rax+0]
    put(&mut code, 0x10E, &[0xF7, 0xF1]); // div ecx (faults: divide by 0)
    put(&mut code, 0x345, &[0x48, 0x83, 0xC0, 0x01]); // add rax, 1
    put(&mut code, 0x349, &[0x58]); // pop rax (return address)
    put(&mut code, 0x34A, &[0x48, 0x83, 0xC0, 0x05]); // add rax, 5 (points to 0x113)
    put(&mut code, 0x34E, &[0x50]); // push rax
    put(&mut code, 0x34F, &[0x48, 0xCF]); // iretq to 0x113
    let mut w = Walker::new(&code, base, 0x20);
    w.branch_to(0x102)
        .branch_to(0x983)
        .branch_to(0x10E)
        .interrupt(0, 0x10E, 0x345)
        .branch_to(0x113);
    let steps = w.steps;
    Scenario {
        name: "table3",
        about: "Table 3: IP filter 0x100..0x110, far jumps and a fault crossing it",
        code,
        base,
        entry: 0x20,
        steps,
        options: ModelOptions {
            filter: Some((0x100, 0x110)),
            ..quiet(base_ctl() | ctl::OS | ctl::USER, 3)
        },
    }
}

/// Figure 6: a call and the RET to its NLIP, with no call in between: the RET is a taken
/// TNT bit, not a TIP.
pub fn figure6() -> Scenario {
    let base = 0x1000;
    let code = assemble(base, |a| {
        let mut f = a.create_label();
        a.call(f)?; // 0x1000, NLIP 0x1005
        a.mov(eax, 60)?;
        a.syscall()?;
        a.set_label(&mut f)?;
        a.nop()?;
        a.ret()?;
        Ok(())
    });
    let mut w = Walker::new(&code, base, base);
    let f = base + 5 + 5 + 2; // after call (5), mov eax (5), syscall (2)
    w.branch_to(f).branch_to(base + 5);
    let exit_nlip = base + 5 + 5 + 2;
    w.branch_to(exit_nlip);
    let steps = std::mem::take(&mut w.steps);
    Scenario {
        name: "figure6",
        about: "Figure 6: return compression without nested calls",
        code,
        base,
        entry: base,
        steps,
        options: quiet(base_ctl() | ctl::USER | ctl::CMPRS_RET, 6),
    }
}

/// Figure 7: nested calls. The inner RET matches RTIT_LAST_CALL_NLIP (the inner call's
/// NLIP) and is compressed; the outer RET does not (LAST_CALL_NLIP still holds the inner
/// call's NLIP) and sends a TIP.
pub fn figure7() -> Scenario {
    let base = 0x1000;
    let code = assemble(base, |a| {
        let mut outer = a.create_label();
        let mut inner = a.create_label();
        a.call(outer)?; // 0x1000 -> NLIP 0x1005
        a.mov(eax, 60)?; // 0x1005
        a.syscall()?; // 0x100a
        a.set_label(&mut outer)?; // 0x100c
        a.nop()?;
        a.call(inner)?; // 0x100d -> NLIP 0x1012
        a.inc(eax)?; // 0x1012 (2 bytes)
        a.ret()?; // 0x1014
        a.set_label(&mut inner)?; // 0x1015
        a.nop()?;
        a.ret()?; // 0x1016
        Ok(())
    });
    let mut w = Walker::new(&code, base, base);
    w.branch_to(0x100c) // call outer
        .branch_to(0x1015) // call inner
        .branch_to(0x1012) // inner ret: compressed
        .branch_to(0x1005) // outer ret: TIP
        .branch_to(0x100c); // exit syscall
    let steps = std::mem::take(&mut w.steps);
    Scenario {
        name: "figure7",
        about: "Figure 7: return compression with nested calls",
        code,
        base,
        entry: base,
        steps,
        options: quiet(base_ctl() | ctl::USER | ctl::CMPRS_RET, 7),
    }
}

/// The 3.3.9 worked example: "Pkt_Cnt value is 0xffc and PKT_Mask is 1 and a far transfer
/// then occurs. It generates a FUP.FAR packet of 7 bytes (no compression was possible) and
/// a FUP.TIP packet of 5 bytes (zero compression). ... the packets sent out are FUP.FAR,
/// PSB, FUP.TIP and the Pkt_Cnt goes from 0xffc to 0xE."
///
/// Code at 0x40_1000 jumps to 0x7F00_0000_0000, whose far JMP goes back to 0x40_2000, so
/// its NLIP shares no upper bytes with LAST_LIP (6-byte payload) and the target compresses
/// to 4 zero-extended bytes.
pub fn psb_worked_example() -> (Scenario, u32) {
    let base = 0x40_1000u64;
    let far_at = 0x7F00_0000_0000u64;
    let mut code = vec![0x90u8; 0x2000];
    code[0..5].copy_from_slice(&[0xE9, 0, 0, 0, 0]); // jmp far_at (patched below as a step)
    let steps = vec![
        Step::Branch {
            ip: base,
            len: 5,
            class: tracemill_decode::insn::InsnClass::Jmp,
            target: far_at,
            next: far_at,
            insns: 1,
        },
        Step::Branch {
            ip: far_at,
            len: 3,
            class: tracemill_decode::insn::InsnClass::Far,
            target: 0,
            next: 0x40_2000,
            insns: 1,
        },
    ];
    (
        Scenario {
            name: "psb_worked_example",
            about: "3.3.9: FUP.FAR crosses Pkt_Cnt bit 12; the PSB goes out before the TIP",
            code,
            base,
            entry: base,
            steps,
            options: ModelOptions {
                pkt_mask: 1,
                ..quiet(base_ctl() | ctl::OS | ctl::USER, 9)
            },
        },
        0xFFC,
    )
}

/// Run the worked example with Pkt_Cnt set to 0xffc just before the far transfer; returns
/// the model output and Pkt_Cnt afterwards.
pub fn run_psb_worked_example() -> (Output, u32) {
    let (s, cnt) = psb_worked_example();
    let mut set = ImageSet::new();
    set.add_raw(s.name, &s.code, s.base, None);
    let mut o = s.options.clone();
    o.record_packets = true;
    let mut m = Model::new(o, &set);
    m.start(s.entry);
    m.feed(&s.steps[0]);
    m.wrmsr_pkt_cnt(cnt);
    m.feed(&s.steps[1]);
    let after = m.pkt_cnt();
    (m.end(), after)
}

/// Every scenario that runs through [`Scenario::run`].
pub fn all() -> Vec<Scenario> {
    vec![table3(), figure6(), figure7()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::compress_ip;
    use tracemill_decode::rtit::packet::{FupKind, Packet};

    /// Packet kinds and decompressed IPs, without CYC/timing (the scenarios run with
    /// those off anyway).
    fn flow(out: &Output) -> Vec<(String, Option<u64>)> {
        let mut last = None;
        out.packets
            .iter()
            .map(|(_, p)| {
                let ip = match p {
                    Packet::Tip(pl) | Packet::Fup(_, pl) => {
                        let ip = tracemill_decode::rtit::last_ip::resolve(pl, last).unwrap();
                        last = Some(ip);
                        Some(ip)
                    }
                    _ => None,
                };
                let name = match p {
                    Packet::Tnt(t) => format!(
                        "tnt:{}",
                        (0..t.len)
                            .map(|i| if t.taken(i) { 'T' } else { 'N' })
                            .collect::<String>()
                    ),
                    p => p.name().to_string(),
                };
                (name, ip)
            })
            .collect()
    }

    fn s(n: &str, ip: Option<u64>) -> (String, Option<u64>) {
        (n.to_string(), ip)
    }

    #[test]
    fn table3_filtered_trace_packets() {
        let out = table3().run();
        assert_eq!(
            flow(&out),
            vec![
                s("psb", None),
                s("fup.pge", Some(0x102)),
                s("fup.pgd", Some(0x105)),
                s("tip", Some(0x983)),
                s("fup.pge", Some(0x10E)),
                s("fup.pgd", Some(0x10E)),
                s("tip", Some(0x345)),
            ]
        );
        // Only the far JMP at 0x102 ran with PacketEn set: one row.
        assert_eq!(out.truth.rows.len(), 1);
        assert_eq!(out.truth.rows.ip[0], 0x102);
    }

    #[test]
    fn figure6_ret_to_last_call_nlip_is_a_taken_bit() {
        let out = figure6().run();
        assert_eq!(
            flow(&out),
            vec![
                s("psb", None),
                s("fup.pge", Some(0x1000)),
                s("tnt:T", None),
                s("fup.pgd", Some(0x100c)),
            ]
        );
        let rows: Vec<_> = out.truth.rows.rows().collect();
        assert!(rows[1].compressed);
        assert_eq!(rows[1].target, Some(0x1005));
    }

    #[test]
    fn figure7_only_innermost_ret_is_compressed() {
        let out = figure7().run();
        assert_eq!(
            flow(&out),
            vec![
                s("psb", None),
                s("fup.pge", Some(0x1000)),
                s("tnt:T", None),
                s("tip", Some(0x1005)),
                s("fup.pgd", Some(0x100c)),
            ]
        );
        let c: Vec<bool> = out.truth.rows.compressed.clone();
        assert_eq!(c, vec![false, false, true, false, false]);
    }

    #[test]
    fn psb_worked_example_3_3_9() {
        let (out, cnt) = run_psb_worked_example();
        let names: Vec<_> = out.packets.iter().map(|(_, p)| p.name()).collect();
        assert_eq!(names, vec!["psb", "fup.pge", "fup.far", "psb", "tip"]);
        let sizes: Vec<u64> = out.packets.windows(2).map(|w| w[1].0 - w[0].0).collect();
        // FUP.FAR: 7 bytes (no compression), PSB 9.
        assert_eq!(sizes[2], 7);
        assert_eq!(sizes[3], 9);
        assert_eq!(out.bytes.len() as u64 - out.packets[4].0, 5);
        assert_eq!(cnt, 0xE);
        let _ = (FupKind::Far, compress_ip(0, None));
    }
}
