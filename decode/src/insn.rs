//! What one x86-64 instruction means for RTIT (spec 2.2, Table 2), decoded with iced-x86.
//!
//! | class     | instructions                                  | RTIT output              |
//! |-----------|-----------------------------------------------|--------------------------|
//! | `Cond`    | Jcc, LOOPcc, JrCXZ                            | a TNT bit                |
//! | `Jmp`     | JMP rel                                       | nothing                  |
//! | `Call`    | CALL rel                                      | nothing (sets LAST_CALL_NLIP) |
//! | `JmpInd`  | JMP r/m                                       | TIP                      |
//! | `CallInd` | CALL r/m                                      | TIP (sets LAST_CALL_NLIP) |
//! | `Ret`     | RET near                                      | TIP, or a taken bit when compressed |
//! | `Far`     | far JMP/CALL/RET, IRET, INT n, SYSRET, SYSEXIT | FUP.FAR + TIP           |
//! | `Syscall` | SYSCALL, SYSENTER                             | FUP.FAR + TIP (or FUP.PGD when leaving user-only tracing) |

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, Register};
use tracemill_schemas::BranchKind;

/// How instructions decode: the code segment's address size (PT's MODE.Exec, Table
/// 36-26; RTIT traces are always 64-bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Bits {
    B16 = 0,
    B32 = 1,
    #[default]
    B64 = 2,
}

impl Bits {
    /// iced-x86's bitness.
    pub fn bitness(self) -> u32 {
        match self {
            Bits::B16 => 16,
            Bits::B32 => 32,
            Bits::B64 => 64,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Bits::B16 => "16-bit",
            Bits::B32 => "32-bit",
            Bits::B64 => "64-bit",
        }
    }
}

/// The RTIT class of an instruction. Everything but `Other` is a branch row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InsnClass {
    Other,
    Cond,
    Jmp,
    Call,
    JmpInd,
    CallInd,
    Ret,
    Far,
    Syscall,
}

impl InsnClass {
    pub fn is_branch(self) -> bool {
        self != InsnClass::Other
    }
    /// Near calls set LAST_CALL_NLIP (4.2.3.2); far calls do not.
    pub fn is_near_call(self) -> bool {
        matches!(self, InsnClass::Call | InsnClass::CallInd)
    }
    /// Far transfers: FUP.FAR (or FUP.PGD) then TIP.
    pub fn is_far(self) -> bool {
        matches!(self, InsnClass::Far | InsnClass::Syscall)
    }
    /// The branch needs a packet to be followed (all but direct jumps and calls).
    pub fn needs_trace(self) -> bool {
        !matches!(self, InsnClass::Other | InsnClass::Jmp | InsnClass::Call)
    }
    /// An indirect near JMP or CALL (its destination comes in a TIP).
    #[inline]
    pub fn is_indirect(self) -> bool {
        matches!(self, InsnClass::JmpInd | InsnClass::CallInd)
    }

    pub fn branch_kind(self) -> Option<BranchKind> {
        Some(match self {
            InsnClass::Other => return None,
            InsnClass::Cond => BranchKind::Cond,
            InsnClass::Jmp => BranchKind::Jmp,
            InsnClass::Call => BranchKind::Call,
            InsnClass::JmpInd => BranchKind::JmpInd,
            InsnClass::CallInd => BranchKind::CallInd,
            InsnClass::Ret => BranchKind::Ret,
            InsnClass::Far => BranchKind::Far,
            InsnClass::Syscall => BranchKind::Syscall,
        })
    }
}

/// One decoded instruction, reduced to what the flow needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnInfo {
    pub ip: u64,
    pub len: u8,
    pub class: InsnClass,
    /// Target of a direct branch (`Cond`, `Jmp`, `Call`); 0 otherwise.
    pub target: u64,
    /// Has a REP/REPNE prefix on a string instruction (retires once, however many
    /// iterations it runs).
    pub rep: bool,
}

impl InsnInfo {
    /// Address of the next sequential instruction.
    pub fn nlip(&self) -> u64 {
        self.ip.wrapping_add(self.len as u64)
    }
}

/// Why an address could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsnError {
    /// No code image covers the address.
    NoImage,
    /// The bytes are not a valid instruction (or run off the end of the image).
    Invalid,
}

/// Classify an iced-x86 instruction.
pub fn classify(ins: &Instruction) -> InsnClass {
    match ins.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => return InsnClass::Syscall,
        Mnemonic::Sysret
        | Mnemonic::Sysretq
        | Mnemonic::Sysexit
        | Mnemonic::Sysexitq
        | Mnemonic::Iret
        | Mnemonic::Iretd
        | Mnemonic::Iretq
        | Mnemonic::Retf
        | Mnemonic::Int
        | Mnemonic::Int1
        | Mnemonic::Int3
        | Mnemonic::Into
        | Mnemonic::Vmcall
        | Mnemonic::Vmlaunch
        | Mnemonic::Vmresume
        | Mnemonic::Rsm => return InsnClass::Far,
        _ => {}
    }
    if ins.is_jmp_far()
        || ins.is_call_far()
        || ins.is_jmp_far_indirect()
        || ins.is_call_far_indirect()
    {
        return InsnClass::Far;
    }
    match ins.flow_control() {
        FlowControl::ConditionalBranch => InsnClass::Cond,
        FlowControl::UnconditionalBranch => InsnClass::Jmp,
        FlowControl::IndirectBranch => InsnClass::JmpInd,
        FlowControl::Call => InsnClass::Call,
        FlowControl::IndirectCall => InsnClass::CallInd,
        FlowControl::Return => InsnClass::Ret,
        FlowControl::Interrupt => InsnClass::Far,
        // XBEGIN/XABORT, UD2 and invalid opcodes do not retire as branches; a fault they
        // raise shows up in the trace as an asynchronous event.
        FlowControl::Next | FlowControl::XbeginXabortXend | FlowControl::Exception => {
            InsnClass::Other
        }
    }
}

/// JMPABS (Intel APX: REX2 `D5` with M0 = 0 and W = 0, opcode `A1`, a 64-bit absolute
/// address), which iced-x86 does not decode: the instruction at `ip` whose bytes start
/// `bytes`, if it is one. Intel PT reports its destination with a TIP, as an indirect
/// jump's (libipt's suite: `tip-jmpabs`, `tip_pgd-jmpabs`; libipt takes the TIP's IP and
/// ignores the immediate), so it is a [`InsnClass::JmpInd`].
pub fn jmpabs(bytes: &[u8], ip: u64, bits: Bits) -> Option<InsnInfo> {
    const LEN: usize = 11;
    let rex2_m0_w = 0x80 | 0x08;
    let is = bits == Bits::B64
        && bytes.len() >= LEN
        && bytes[0] == 0xD5
        && bytes[1] & rex2_m0_w == 0
        && bytes[2] == 0xA1;
    is.then_some(InsnInfo {
        ip,
        len: LEN as u8,
        class: InsnClass::JmpInd,
        target: 0,
        rep: false,
    })
}

/// Decode the 64-bit instruction at `ip` whose bytes start `bytes`.
#[inline]
pub fn decode_insn(bytes: &[u8], ip: u64) -> Result<InsnInfo, InsnError> {
    decode_insn_in(bytes, ip, Bits::B64)
}

/// Decode the instruction at `ip` whose bytes start `bytes`, as `bits` code.
#[inline]
pub fn decode_insn_in(bytes: &[u8], ip: u64, bits: Bits) -> Result<InsnInfo, InsnError> {
    let mut dec = Decoder::with_ip(bits.bitness(), bytes, ip, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    dec.decode_out(&mut ins);
    info_of(&ins)
        .or_else(|| jmpabs(bytes, ip, bits))
        .ok_or(InsnError::Invalid)
}

/// Whether the instruction at `ip` (bytes from `bytes`) is a VM entry, VMLAUNCH or
/// VMRESUME: erratum SKD022 makes their disables look asynchronous.
pub fn is_vm_entry(bytes: &[u8], ip: u64, bits: Bits) -> bool {
    let mut dec = Decoder::with_ip(bits.bitness(), bytes, ip, DecoderOptions::NONE);
    matches!(
        dec.decode().mnemonic(),
        Mnemonic::Vmlaunch | Mnemonic::Vmresume
    )
}

/// The instructions an Intel PT packet without an IP binds to: the walk goes on to the
/// next one and the packet takes effect after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindsTo {
    /// A PIP (SDM 36.4.2.7, "Application" 2): the next MOV CR3 or far branch (VMLAUNCH
    /// and VMRESUME are far branches here).
    Paging,
    /// A VMCS packet (36.4.2.15): the next VMPTRLD or far branch.
    Vmcs,
    /// A PTW without IP (36.4.2.21): the next PTWRITE.
    Ptwrite,
    /// A TIP.PGD without IP (36.4.2.5): a MOV CR3 (the new CR3 leaves the traced context);
    /// it also binds to the next branch that needs trace, which the walk finds itself.
    Cr3Write,
}

impl BindsTo {
    /// Far branches take this binding (they end a block, so the walk meets them there).
    pub fn far_branch(self) -> bool {
        matches!(self, BindsTo::Paging | BindsTo::Vmcs)
    }
}

/// Whether the instruction at `ip` (bytes from `bytes`, decoded as `bits` code) is one
/// that `to` binds to. Far branches count only when [`BindsTo::far_branch`].
pub fn binds_to(bytes: &[u8], ip: u64, bits: Bits, to: BindsTo) -> bool {
    let mut dec = Decoder::with_ip(bits.bitness(), bytes, ip, DecoderOptions::NONE);
    let ins = dec.decode();
    if ins.is_invalid() {
        return false;
    }
    let mov_cr3 = ins.mnemonic() == Mnemonic::Mov && ins.op0_register() == Register::CR3;
    match to {
        BindsTo::Paging => mov_cr3 || classify(&ins).is_far(),
        BindsTo::Vmcs => ins.mnemonic() == Mnemonic::Vmptrld || classify(&ins).is_far(),
        BindsTo::Ptwrite => ins.mnemonic() == Mnemonic::Ptwrite,
        BindsTo::Cr3Write => mov_cr3,
    }
}

/// Reduce a decoded instruction; `None` when it is invalid.
#[inline]
pub fn info_of(ins: &Instruction) -> Option<InsnInfo> {
    if ins.is_invalid() {
        return None;
    }
    let class = classify(ins);
    let target = match class {
        InsnClass::Cond | InsnClass::Jmp | InsnClass::Call => ins.near_branch_target(),
        _ => 0,
    };
    Some(InsnInfo {
        ip: ins.ip(),
        len: ins.len() as u8,
        class,
        target,
        rep: (ins.has_rep_prefix() || ins.has_repne_prefix()) && ins.is_string_instruction(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(bytes: &[u8]) -> InsnClass {
        decode_insn(bytes, 0x1000).unwrap().class
    }

    #[test]
    fn table2_classes() {
        assert_eq!(class_of(&[0x74, 0x05]), InsnClass::Cond); // je
        assert_eq!(class_of(&[0xE2, 0xFE]), InsnClass::Cond); // loop
        assert_eq!(class_of(&[0xE3, 0x00]), InsnClass::Cond); // jrcxz
        assert_eq!(class_of(&[0xEB, 0x00]), InsnClass::Jmp);
        assert_eq!(class_of(&[0xE8, 0, 0, 0, 0]), InsnClass::Call);
        assert_eq!(class_of(&[0xFF, 0xE0]), InsnClass::JmpInd); // jmp rax
        assert_eq!(class_of(&[0xFF, 0xD0]), InsnClass::CallInd); // call rax
        assert_eq!(class_of(&[0xC3]), InsnClass::Ret);
        assert_eq!(class_of(&[0xC2, 8, 0]), InsnClass::Ret);
        assert_eq!(class_of(&[0x0F, 0x05]), InsnClass::Syscall);
        assert_eq!(class_of(&[0x48, 0x0F, 0x07]), InsnClass::Far); // sysretq
        assert_eq!(class_of(&[0x48, 0xCF]), InsnClass::Far); // iretq
        assert_eq!(class_of(&[0xCD, 0x80]), InsnClass::Far); // int 0x80
        assert_eq!(class_of(&[0xCB]), InsnClass::Far); // retf
        assert_eq!(class_of(&[0xFF, 0x28]), InsnClass::Far); // jmp far [rax]
        assert_eq!(class_of(&[0x90]), InsnClass::Other);
        assert_eq!(class_of(&[0x0F, 0x0B]), InsnClass::Other); // ud2
    }

    #[test]
    fn direct_targets_and_rep() {
        let i = decode_insn(&[0x74, 0x05], 0x1000).unwrap();
        assert_eq!((i.target, i.len, i.nlip()), (0x1007, 2, 0x1002));
        let i = decode_insn(&[0xF3, 0xA4], 0x1000).unwrap(); // rep movsb
        assert!(i.rep);
        assert_eq!(decode_insn(&[0x0F], 0), Err(InsnError::Invalid));
    }

    /// SDM 36.4.2.7 (PIP: "the next MOV CR3, far branch, or VMRESUME/VMLAUNCH"),
    /// 36.4.2.15 (VMCS: VMPTRLD), 36.4.2.21 (PTW: the PTWRITE), 36.4.2.5 (TIP.PGD without
    /// IP: a MOV CR3).
    #[test]
    fn what_packets_without_ip_bind_to() {
        let b = |bytes: &[u8], to| binds_to(bytes, 0x1000, Bits::B64, to);
        let mov_cr3 = [0x0F, 0x22, 0xD8];
        let mov_from_cr3 = [0x0F, 0x20, 0xD8];
        let far_call = [0xFF, 0x18];
        let vmlaunch = [0x0F, 0x01, 0xC2];
        let vmresume = [0x0F, 0x01, 0xC3];
        let vmptrld = [0x0F, 0xC7, 0x30];
        let ptwrite = [0xF3, 0x0F, 0xAE, 0xE0];
        let nop = [0x90];
        for x in [&mov_cr3[..], &far_call, &vmlaunch, &vmresume] {
            assert!(b(x, BindsTo::Paging), "{x:x?}");
        }
        for x in [&mov_from_cr3[..], &vmptrld, &ptwrite, &nop] {
            assert!(!b(x, BindsTo::Paging), "{x:x?}");
        }
        for x in [&vmptrld[..], &far_call, &vmlaunch, &vmresume] {
            assert!(b(x, BindsTo::Vmcs), "{x:x?}");
        }
        assert!(!b(&mov_cr3, BindsTo::Vmcs));
        assert!(b(&ptwrite, BindsTo::Ptwrite));
        assert!(!b(&nop, BindsTo::Ptwrite));
        assert!(b(&mov_cr3, BindsTo::Cr3Write));
        assert!(!b(&far_call, BindsTo::Cr3Write));
        assert!(!b(&[0x0F], BindsTo::Paging));
    }

    /// JMPABS (APX), which iced-x86 does not decode, is an indirect jump of 11 bytes in
    /// 64-bit code; with W or M0 set, cut short or in 32-bit code it is not one.
    #[test]
    fn jmpabs_is_an_indirect_jump() {
        let b = [0xD5, 0x00, 0xA1, 0x0d, 0x10, 0, 0, 0, 0, 0, 0];
        let i = decode_insn(&b, 0x1000).unwrap();
        assert_eq!((i.class, i.len, i.nlip()), (InsnClass::JmpInd, 11, 0x100b));
        assert!(decode_insn(&[0xD5, 0x08, 0xA1, 0, 0, 0, 0, 0, 0, 0, 0], 0).is_err());
        assert!(decode_insn(&[0xD5, 0x80, 0xA1, 0, 0, 0, 0, 0, 0, 0, 0], 0).is_err());
        assert!(decode_insn(&b[..10], 0).is_err());
        assert!(decode_insn_in(&b, 0, Bits::B32).map_or(true, |i| i.len != 11));
    }
}
