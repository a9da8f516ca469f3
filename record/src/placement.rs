//! Where to put a function's entry uprobe so that the kernel emulates the probed instruction
//! instead of single-stepping it.
//!
//! A uprobe replaces an instruction with int3. When it fires, the kernel runs the BPF
//! programs and then must execute the displaced instruction. x86 emulates a few kinds in
//! the trap handler (relative jmp, jcc and call, `push reg`, `nop`): the hit then costs one
//! trap, ≈ 0.75 µs here. Any other instruction is copied to an out-of-line page and
//! single-stepped: a second trap (#DB), ≈ 6 µs in this KVM guest. glibc's `free` starts with
//! `test %rdi,%rdi` and `pthread_mutex_lock` with a load: probing them at their first byte
//! made allocation tracing cost what bcc's memleak costs.
//!
//! So the probe goes on the first emulated instruction of the function's entry, when every
//! instruction before it (1) cannot branch, (2) writes no memory, the stack pointer, the frame
//! pointer or any register the BPF program reads, and (3) is not itself the target of a branch
//! in the function. Then every call passes the new point exactly once, with the registers,
//! the stack pointer and the return address at `[rsp]` exactly as they were at entry — what
//! the entry programs, the uretprobe (which swaps the word at `[rsp]`) and the stack walk
//! (frame pointers or a stack copy: the CFA rule of these instructions is the entry's) use.
//! `free` is probed at its `je` (+3); `pthread_mutex_unlock` at its `jmp` (+5). Otherwise the
//! entry stays where it is, and the caller reports that the function is single-stepped.
//!
//! Departure from the design, which probes every function at its symbol: the cost is the
//! reason. The check of (3) looks at the function's own code (its symbol size); a branch
//! from another function into its first bytes (not an entry, not something compilers make)
//! would be counted as a call.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    Register,
};

/// The System V argument registers, in order.
pub const ARGS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// The first argument register, and the first three.
pub const ARGS_1: [Register; 1] = [Register::RDI];
pub const ARGS_3: [Register; 3] = [Register::RDI, Register::RSI, Register::RDX];

/// Where the probe goes: `skip` bytes past the function's start; `single_step`: the probed
/// instruction is one the kernel single-steps (no better place was found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub skip: u64,
    pub single_step: bool,
}

/// At most this many instructions are looked past.
const MAX_SKIPPED: usize = 8;

/// Whether the kernel emulates `bytes` (one whole instruction) when it is probed, rather than
/// single-stepping it (`branch_setup_xol_ops` and `push_setup_xol_ops` in
/// arch/x86/kernel/uprobes.c): jmp rel8/rel32, call rel32, jcc rel8/rel32, `nop` (0x90) and
/// `push r64` with no prefix but REX.B. Prefixed forms are left out on purpose (the kernel
/// refuses some, e.g. 0x66).
pub fn emulated(bytes: &[u8]) -> bool {
    matches!(
        bytes,
        [0xeb, _]
            | [0x70..=0x7f, _]
            | [0xe9 | 0xe8, _, _, _, _]
            | [0x0f, 0x80..=0x8f, _, _, _, _]
            | [0x90]
            | [0x50..=0x57]
            | [0x41, 0x50..=0x57]
    )
}

/// The placement for a function whose code is `code` (its symbol's bytes; the first
/// instruction at `code[0]`), for a BPF program that reads the registers `keep` (the stack
/// pointer and the frame pointer are always kept).
pub fn place(code: &[u8], keep: &[Register]) -> Placement {
    let at_entry = |single_step| Placement {
        skip: 0,
        single_step,
    };
    let mut dec = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut ins = Instruction::default();
    let mut skip = None;
    for n in 0..=MAX_SKIPPED {
        if !dec.can_decode() {
            break;
        }
        dec.decode_out(&mut ins);
        if ins.is_invalid() {
            break;
        }
        let start = ins.ip() as usize;
        let Some(bytes) = code.get(start..start + ins.len()) else {
            break;
        };
        if emulated(bytes) {
            if n == 0 {
                return at_entry(false);
            }
            skip = Some(ins.ip());
            break;
        }
        if n == MAX_SKIPPED || !passable(&ins, &mut info, keep) {
            break;
        }
    }
    let Some(skip) = skip else {
        return at_entry(true);
    };
    if branched_into(code, skip) {
        return at_entry(true);
    }
    Placement {
        skip,
        single_step: false,
    }
}

/// Whether `ins` may run before the probe: no control flow, no memory written, no write to
/// a kept register, the stack pointer or the frame pointer, and one of a few plain
/// arithmetic and move instructions (nothing with side effects beyond its destination).
fn passable(ins: &Instruction, info: &mut InstructionInfoFactory, keep: &[Register]) -> bool {
    use Mnemonic::*;
    if ins.flow_control() != FlowControl::Next
        || ins.has_lock_prefix()
        || ins.has_rep_prefix()
        || ins.has_repne_prefix()
        || !matches!(
            ins.mnemonic(),
            Test | Cmp
                | Mov
                | Movzx
                | Movsx
                | Movsxd
                | Lea
                | And
                | Or
                | Xor
                | Add
                | Sub
                | Bt
                | Shl
                | Shr
                | Sar
                | Endbr64
                | Nop
        )
    {
        return false;
    }
    let info = info.info(ins);
    if info.used_memory().iter().any(|m| {
        !matches!(
            m.access(),
            OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess
        )
    }) {
        return false;
    }
    info.used_registers().iter().all(|u| {
        let written = !matches!(
            u.access(),
            OpAccess::Read | OpAccess::CondRead | OpAccess::None
        );
        let r = u.register().full_register();
        !written
            || !(r == Register::RSP
                || r == Register::RBP
                || r == Register::RIP
                || keep.contains(&r))
    })
}

/// Whether a relative branch or call in `code` targets the bytes (0, skip]: a path that would
/// reach the probe without coming through the entry.
fn branched_into(code: &[u8], skip: u64) -> bool {
    let mut dec = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut ins);
        if ins.is_invalid() {
            continue;
        }
        if matches!(
            ins.flow_control(),
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch | FlowControl::Call
        ) {
            let t = ins.near_branch_target();
            if t > 0 && t <= skip {
                return true;
            }
        }
    }
    false
}

/// How a function's calls end, for timing them without a uretprobe (see `exits`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exits {
    /// Addresses (in the code's address space) of its `ret` instructions and of its direct
    /// jumps out of the function (tail calls): at each, the stack pointer is back at its
    /// value at entry.
    pub sites: Vec<u64>,
    /// Which of `sites` are tail jumps (the rest are `ret`s).
    pub tails: Vec<u64>,
    /// It calls or tail-calls other code, so an exception may pass through it.
    pub calls_out: bool,
    /// Some exits cannot be told from jumps inside: an indirect jump (a jump table, or a tail
    /// call through a pointer), a conditional jump out of the function (taken or not, a probe
    /// on it fires), or bytes that do not decode: the first such instruction's address
    /// and what it is.
    pub ambiguous: Option<(u64, &'static str)>,
}

/// The exits of a function whose code is `parts`: (address, bytes) of its body and of its
/// other parts (its `.cold` fragment).
///
/// Why: a uretprobe replaces the return address on the stack with the kernel's trampoline.
/// A C++ exception (or a thread cancellation) unwinding through that frame finds no unwind
/// information for the trampoline, and the runtime calls std::terminate: the traced service
/// dies (seen here on 6.18, with bpftrace as with ebrec). A uprobe on each exit instead leaves
/// the stack alone: an exception only leaves the call unfinished.
pub fn exits(parts: &[(u64, &[u8])]) -> Exits {
    let inside = |a: u64| {
        parts
            .iter()
            .any(|&(start, code)| a >= start && a - start < code.len() as u64)
    };
    let mut e = Exits::default();
    let mut ins = Instruction::default();
    for &(start, code) in parts {
        let mut dec = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
        while dec.can_decode() {
            dec.decode_out(&mut ins);
            if ins.is_invalid() {
                // Padding after the last instruction is int3 or nop; anything else is a
                // byte we cannot read as code.
                e.ambiguous
                    .get_or_insert((ins.ip(), "bytes that do not decode"));
                continue;
            }
            match ins.flow_control() {
                FlowControl::Return => e.sites.push(ins.ip()),
                FlowControl::Call | FlowControl::IndirectCall => e.calls_out = true,
                FlowControl::UnconditionalBranch if !inside(ins.near_branch_target()) => {
                    e.calls_out = true;
                    e.sites.push(ins.ip());
                    e.tails.push(ins.ip());
                }
                FlowControl::ConditionalBranch if !inside(ins.near_branch_target()) => {
                    e.calls_out = true;
                    e.ambiguous
                        .get_or_insert((ins.ip(), "a conditional jump out of it"));
                }
                FlowControl::IndirectBranch => {
                    e.calls_out = true;
                    e.ambiguous.get_or_insert((
                        ins.ip(),
                        "an indirect jump (a jump table, or a tail call through a pointer)",
                    ));
                }
                _ => {}
            }
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_args() -> &'static [Register] {
        &ARGS
    }

    // glibc 2.36 free: test %rdi,%rdi; je +0xc5; push %rbp; lea -0x10(%rdi),%rsi; push %rbx
    const FREE: &[u8] = &[
        0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55, 0x48, 0x8d, 0x77, 0xf0, 0x53,
        0xc3,
    ];

    #[test]
    fn free_is_probed_at_its_je() {
        assert_eq!(
            place(FREE, all_args()),
            Placement {
                skip: 3,
                single_step: false
            }
        );
    }

    #[test]
    fn push_first_stays_at_entry() {
        // malloc: push %r12; push %rbp; push %rbx
        let malloc = [0x41, 0x54, 0x55, 0x53, 0xc3];
        assert_eq!(
            place(&malloc, all_args()),
            Placement {
                skip: 0,
                single_step: false
            }
        );
    }

    #[test]
    fn register_the_program_reads_stops_the_search() {
        // pthread_mutex_lock: mov 0x10(%rdi),%eax; mov %eax,%edx; and $0x17f,%edx;
        // and $0x7c,%eax; jne ...
        let lock = [
            0x8b, 0x47, 0x10, 0x89, 0xc2, 0x81, 0xe2, 0x7f, 0x01, 0x00, 0x00, 0x83, 0xe0, 0x7c,
            0x0f, 0x85, 0xac, 0x00, 0x00, 0x00, 0xc3,
        ];
        // With every argument kept, %edx (the third) is written before the jne.
        assert_eq!(
            place(&lock, all_args()),
            Placement {
                skip: 0,
                single_step: true
            }
        );
        // The lock probe reads only the mutex (%rdi).
        assert_eq!(
            place(&lock, &[Register::RDI]),
            Placement {
                skip: 14,
                single_step: false
            }
        );
    }

    #[test]
    fn stack_pointer_and_memory_writes_stop_the_search() {
        // sub $0x18,%rsp; jmp
        assert!(place(&[0x48, 0x83, 0xec, 0x18, 0xeb, 0x00], &[]).single_step);
        // mov %rdi,(%rsp); jmp  (writes the word the uretprobe swaps)
        assert!(place(&[0x48, 0x89, 0x3c, 0x24, 0xeb, 0x00], &[]).single_step);
        // mov %rsp,%rbp; jmp
        assert!(place(&[0x48, 0x89, 0xe5, 0xeb, 0x00], &[]).single_step);
        // endbr64; push %rbp: the endbr64 is looked past.
        assert_eq!(
            place(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3], all_args()),
            Placement {
                skip: 4,
                single_step: false
            }
        );
    }

    #[test]
    fn a_branch_into_the_skipped_bytes_keeps_the_entry() {
        // test %rdi,%rdi; je +2; (3) ... (5) jmp back to the je at 3
        let code = [0x48, 0x85, 0xff, 0x74, 0x02, 0xeb, 0xfc, 0xc3];
        assert_eq!(
            place(&code, all_args()),
            Placement {
                skip: 0,
                single_step: true
            }
        );
        // The same, jumping back to the entry: fine.
        let code = [0x48, 0x85, 0xff, 0x74, 0x02, 0xeb, 0xf9, 0xc3];
        assert_eq!(
            place(&code, all_args()),
            Placement {
                skip: 3,
                single_step: false
            }
        );
    }

    #[test]
    fn exits_are_rets_and_jumps_out() {
        // push %rbp; mov %rsp,%rbp; call +0; test %edi,%edi; je +2; pop %rbp; ret;
        // pop %rbp; jmp <far away>
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x85, 0xff, 0x74, 0x02, 0x5d,
            0xc3, 0x5d, 0xe9, 0x00, 0x10, 0x00, 0x00,
        ];
        let e = exits(&[(0x1000, &code)]);
        assert_eq!(e.sites, vec![0x100e, 0x1010]);
        assert!(e.calls_out && e.ambiguous.is_none(), "{e:?}");
        // A leaf: no call, nothing can unwind through it.
        let e = exits(&[(0x1000, &[0x89, 0xf8, 0xc3])]);
        assert_eq!(e.sites, vec![0x1002]);
        assert!(!e.calls_out && e.ambiguous.is_none());
        // A jump into its .cold part is inside; the cold part's ret is an exit.
        let main = [0x85, 0xff, 0x0f, 0x85, 0xf8, 0x0f, 0x00, 0x00, 0xc3]; // jne 0x2000
        let cold = [0xe8, 0x00, 0x00, 0x00, 0x00, 0xc3];
        let e = exits(&[(0x1000, &main), (0x2000, &cold)]);
        assert_eq!(e.sites, vec![0x1008, 0x2005]);
        assert!(e.calls_out && e.ambiguous.is_none(), "{e:?}");
        // Without the cold part, that jne leaves the function: taken or not, unknown.
        assert_eq!(
            exits(&[(0x1000, &main)]).ambiguous,
            Some((0x1002, "a conditional jump out of it"))
        );
        // jmp *%rax: a jump table or a tail call.
        let e = exits(&[(0x1000, &[0x90, 0xff, 0xe0, 0xc3])]);
        assert_eq!(e.ambiguous.map(|a| a.0), Some(0x1001));
        assert!(e.calls_out);
    }

    #[test]
    fn garbage_and_short_code_never_move() {
        assert_eq!(place(&[], all_args()).skip, 0);
        assert_eq!(place(&[0x48, 0x85], all_args()).skip, 0);
        assert_eq!(place(&[0x0f, 0x0b], all_args()).skip, 0);
        // Eight test instructions then a jmp: more than MAX_SKIPPED.
        let mut code: Vec<u8> = [0x48, 0x85, 0xff].repeat(9);
        code.extend([0xeb, 0x00]);
        assert!(place(&code, all_args()).single_step);
    }
}
