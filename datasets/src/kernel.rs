//! A tiny kernel for traces that include kernel code (RTIT_CTL.OS set).
//!
//! Real programs run as user code; to trace what the hardware does on a syscall or an
//! interrupt when the kernel is traced too (FUP.FAR + TIP, Table 19 rows 27/28), and on a
//! context switch (MOV CR3 sends a PIP, 4.2.10), the model runs this stub as the kernel.
//! It is real x86-64 code (assembled with iced-x86), written into the bundle as a raw
//! image shared by every address space, so a decoder walks it like any other code.
//!
//! ```text
//! boot:          mov rax, imm ; mov cr3, rax ; iretq            -> first process
//! syscall_entry: swapgs ; cmp rax, 231 ; je sys_exit
//!                nop ; swapgs ; (cs ds es fs) sysretq           -> back to user
//! sys_exit:      jmp do_switch
//! irq_entry:     push rax ; cmp rax, 0 ; jne do_switch
//!                pop rax ; iretq                                -> interrupted code
//! do_switch:     mov rax, imm ; mov cr3, rax ; iretq            -> next process
//! ```
//!
//! The SYSRET carries four redundant segment prefixes: erratum E1 concerns far transfers
//! with more than three prefixes, whose FUP.FAR may point inside the instruction.

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;
use tracemill_decode::insn::{decode_insn, InsnClass};

use crate::exec::Step;
use crate::model::KStep;

/// Default load address of the kernel stub.
pub const KERNEL_BASE: u64 = 0xFFFF_FFFF_8100_0000;

/// The kernel stub: its code and the addresses the model needs.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub base: u64,
    pub code: Vec<u8>,
    pub boot: u64,
    pub syscall_entry: u64,
    pub irq_entry: u64,
    pub sysret_ip: u64,
    pub sysret_len: u8,
    pub sysret_prefixes: u8,
    /// Show erratum E1 on the prefixed SYSRET.
    pub e1: bool,
    boot_iret: u64,
    sys_je: u64,
    sys_exit: u64,
    irq_jne: u64,
    irq_iret: u64,
    sw_iret: u64,
    do_switch: u64,
}

impl Kernel {
    pub fn new(base: u64, e1: bool) -> Self {
        build(base, e1).expect("the kernel stub assembles")
    }

    fn insn(&self, ip: u64) -> (u8, InsnClass, u64) {
        let off = (ip - self.base) as usize;
        let i = decode_insn(&self.code[off..], ip).expect("kernel stub decodes");
        (i.len, i.class, i.target)
    }

    fn br(&self, ip: u64, insns: u32, next: u64) -> KStep {
        let (len, class, target) = self.insn(ip);
        KStep::Run(Step::Branch {
            ip,
            len,
            class,
            target,
            next,
            insns,
        })
    }

    /// Boot: load the first process's CR3 and IRET into it.
    pub fn switch_path(&self) -> Vec<KStep> {
        vec![KStep::MovCr3, self.br(self.boot_iret, 3, 0)]
    }

    /// A syscall that returns.
    pub fn syscall_path(&self, exit: bool) -> Vec<KStep> {
        let (je_len, _, _) = self.insn(self.sys_je);
        if exit {
            vec![self.br(self.sys_je, 3, self.sys_exit), KStep::Exit]
        } else {
            vec![
                self.br(self.sys_je, 3, self.sys_je + je_len as u64),
                self.br(self.sysret_ip, 3, 0),
            ]
        }
    }

    /// An exit syscall after which the kernel switches to another process.
    pub fn exit_switch_path(&self) -> Vec<KStep> {
        vec![
            self.br(self.sys_je, 3, self.sys_exit),
            self.br(self.sys_exit, 1, self.do_switch),
            KStep::MovCr3,
            self.br(self.sw_iret, 3, 0),
        ]
    }

    /// The timer interrupt, with or without a context switch.
    pub fn irq_path(&self, switch: bool) -> Vec<KStep> {
        let (jne_len, _, _) = self.insn(self.irq_jne);
        if switch {
            vec![
                self.br(self.irq_jne, 3, self.do_switch),
                KStep::MovCr3,
                self.br(self.sw_iret, 3, 0),
            ]
        } else {
            vec![
                self.br(self.irq_jne, 3, self.irq_jne + jne_len as u64),
                self.br(self.irq_iret, 2, 0),
            ]
        }
    }
}

fn build(base: u64, e1: bool) -> Result<Kernel, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut boot = a.create_label();
    let mut boot_iret = a.create_label();
    let mut syscall_entry = a.create_label();
    let mut sys_je = a.create_label();
    let mut sysret = a.create_label();
    let mut sys_exit = a.create_label();
    let mut irq_entry = a.create_label();
    let mut irq_jne = a.create_label();
    let mut irq_iret = a.create_label();
    let mut do_switch = a.create_label();
    let mut sw_iret = a.create_label();

    a.set_label(&mut boot)?;
    a.mov(rax, 0x1000i64)?;
    a.mov(cr3, rax)?;
    a.set_label(&mut boot_iret)?;
    a.iretq()?;

    a.set_label(&mut syscall_entry)?;
    a.swapgs()?;
    a.cmp(rax, 231)?;
    a.set_label(&mut sys_je)?;
    a.je(sys_exit)?;
    a.nop()?;
    a.swapgs()?;
    a.set_label(&mut sysret)?;
    // cs ds es fs sysretq: four prefixes (E1 territory).
    a.db(&[0x2E, 0x3E, 0x26, 0x64, 0x48, 0x0F, 0x07])?;

    a.set_label(&mut sys_exit)?;
    a.jmp(do_switch)?;

    a.set_label(&mut irq_entry)?;
    a.push(rax)?;
    a.cmp(rax, 0)?;
    a.set_label(&mut irq_jne)?;
    a.jne(do_switch)?;
    a.pop(rax)?;
    a.set_label(&mut irq_iret)?;
    a.iretq()?;

    a.set_label(&mut do_switch)?;
    a.mov(rax, 0x2000i64)?;
    a.mov(cr3, rax)?;
    a.set_label(&mut sw_iret)?;
    a.iretq()?;

    let r = a.assemble_options(base, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let ip = |l: &CodeLabel| r.label_ip(l);
    let sysret_ip = ip(&sysret)?;
    Ok(Kernel {
        base,
        code: r.inner.code_buffer.clone(),
        boot: ip(&boot)?,
        syscall_entry: ip(&syscall_entry)?,
        irq_entry: ip(&irq_entry)?,
        sysret_ip,
        sysret_len: 7,
        sysret_prefixes: 4,
        e1,
        boot_iret: ip(&boot_iret)?,
        sys_je: ip(&sys_je)?,
        sys_exit: ip(&sys_exit)?,
        irq_jne: ip(&irq_jne)?,
        irq_iret: ip(&irq_iret)?,
        sw_iret: ip(&sw_iret)?,
        do_switch: ip(&do_switch)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_decodes_with_the_expected_classes() {
        let k = Kernel::new(KERNEL_BASE, true);
        assert_eq!(k.insn(k.sysret_ip), (7, InsnClass::Far, 0));
        assert_eq!(k.insn(k.boot_iret).1, InsnClass::Far);
        assert_eq!(k.insn(k.sys_je).1, InsnClass::Cond);
        assert_eq!(k.insn(k.sys_je).2, k.sys_exit);
        assert_eq!(k.insn(k.irq_jne).2, k.do_switch);
        // Every path's first branch is reached by walking straight from its entry.
        for (entry, path) in [
            (k.syscall_entry, k.syscall_path(false)),
            (k.irq_entry, k.irq_path(false)),
            (k.irq_entry, k.irq_path(true)),
            (k.boot, k.switch_path()),
        ] {
            let mut ip = entry;
            for s in path {
                if let KStep::Run(Step::Branch {
                    ip: bip,
                    insns,
                    next,
                    ..
                }) = s
                {
                    for _ in 1..insns {
                        ip += k.insn(ip).0 as u64;
                    }
                    assert_eq!(ip, bip);
                    ip = next;
                }
            }
        }
    }
}
