//! The walk: a copied user stack stepped back frame by frame with the CFI rows of each
//! module ([`super::tables`]), or by the frame-pointer chain where a module has none. It
//! knows nothing of files or traces: the caller says, for each address, which mapping it
//! is in and that mapping's tables ([`Mapped`]).
use super::tables::{Cfa, Miss, Row, Rule, UnwindInfo, NREGS, RBP, RIP, RSP};
use ebtrace_format::proto::UserStackCopy;
use gimli::{EndianSlice, EvaluationResult, Expression, LittleEndian, Register, Value};
use std::fmt;

/// No walk returns more frames than this, whatever the caller asks.
pub const MAX_FRAMES: usize = 1024;

/// rbx, rbp, r12–r15: preserved across calls, so "same value" when no rule says more.
const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

/// Steps allowed to one DWARF expression (a backward `DW_OP_skip` must not hang us).
const EXPRESSION_STEPS: u32 = 256;

/// One mapping of the process, as the walk needs it.
#[derive(Debug, Clone, Copy)]
pub struct Mapped<'a> {
    /// Runtime range `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub file_offset: u64,
    /// The module's tables; None when there are none (no file, no `.eh_frame`, an
    /// anonymous or JIT mapping): the frame-pointer chain is tried there.
    pub info: Option<&'a UnwindInfo>,
    /// The caller's name for the module (a build-id id in a trace), echoed in
    /// [`Stop::NoCfi`] and [`Stop::BadCfi`].
    pub module: u64,
}

/// Why a walk ended before the outermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Stop {
    /// A value the next frame needs is at `address`, outside the copied bytes.
    CopyTooSmall { address: u64 },
    /// No CFI for `address` (the runtime address looked up) in `module`, and no usable
    /// frame-pointer chain.
    NoCfi { module: u64, address: u64 },
    /// `address` is in no mapping.
    NoMapping { address: u64 },
    /// The CFI of `module` for `address` does not parse, or names an unknown rule.
    BadCfi { module: u64, address: u64 },
    /// The CFA or the caller's stack pointer did not move up the stack (a loop, or
    /// garbage).
    BadCfa { cfa: u64 },
    /// A DWARF expression the walk cannot evaluate.
    UnsupportedExpression { address: u64 },
    /// A rule needs DWARF register `register`, whose value is unknown here (not
    /// recorded, or not preserved across calls).
    MissingRegister { register: u16 },
    /// The caller's limit (or [`MAX_FRAMES`]) was reached.
    MaxFrames,
}

impl Stop {
    /// A short, stable name of the reason, for counting ("copy too small", "no CFI", …).
    pub fn reason(&self) -> &'static str {
        match self {
            Stop::CopyTooSmall { .. } => "copy too small",
            Stop::NoCfi { .. } => "no CFI",
            Stop::NoMapping { .. } => "outside any mapping",
            Stop::BadCfi { .. } => "bad CFI",
            Stop::BadCfa { .. } => "bad CFA",
            Stop::UnsupportedExpression { .. } => "unsupported CFI expression",
            Stop::MissingRegister { .. } => "missing register",
            Stop::MaxFrames => "max frames",
        }
    }

    /// The module the reason is about, for the reasons that name one.
    pub fn module(&self) -> Option<u64> {
        match self {
            Stop::NoCfi { module, .. } | Stop::BadCfi { module, .. } => Some(*module),
            _ => None,
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())?;
        match self {
            Stop::CopyTooSmall { address } => write!(f, " (read at {address:#x})"),
            Stop::NoCfi { address, .. }
            | Stop::BadCfi { address, .. }
            | Stop::NoMapping { address }
            | Stop::UnsupportedExpression { address } => write!(f, " at {address:#x}"),
            Stop::BadCfa { cfa } => write!(f, " {cfa:#x}"),
            Stop::MissingRegister { register } => write!(f, " {register}"),
            Stop::MaxFrames => Ok(()),
        }
    }
}

/// The result of a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Leaf first: `rip`, then return addresses (the interrupted instruction after a
    /// signal frame).
    pub ips: Vec<u64>,
    /// Why the walk ended early; None when it reached the outermost frame.
    pub stop: Option<Stop>,
    /// Frames found by the frame-pointer chain, where a module had no CFI.
    pub fp_steps: u32,
    /// Indices (> 0) of `ips` that are exact instruction addresses (after a signal frame).
    pub exact: Vec<u32>,
}

/// The copied stack as memory.
struct Memory<'a> {
    base: u64,
    data: &'a [u8],
}

impl Memory<'_> {
    fn read(&self, address: u64, size: u8) -> Result<u64, Stop> {
        let size = usize::from(size);
        let bytes = address
            .checked_sub(self.base)
            .and_then(|off| usize::try_from(off).ok())
            .and_then(|off| self.data.get(off..off.checked_add(size)?))
            .filter(|_| (1..=8).contains(&size))
            .ok_or(Stop::CopyTooSmall { address })?;
        let mut buf = [0u8; 8];
        buf[..size].copy_from_slice(bytes);
        Ok(u64::from_le_bytes(buf))
    }

    fn contains(&self, address: u64, len: u64) -> bool {
        address
            .checked_sub(self.base)
            .and_then(|off| off.checked_add(len))
            .is_some_and(|end| end <= self.data.len() as u64)
    }
}

/// A register's value, or why it has none.
type Reg = Result<u64, Stop>;

/// Walks the stack of `copy`. `find` gives the mapping of a runtime address;
/// at most `max_frames` (capped at [`MAX_FRAMES`]) addresses come back.
pub fn unwind<'a, F>(copy: &UserStackCopy, find: F, max_frames: usize) -> Unwound
where
    F: Fn(u64) -> Option<Mapped<'a>>,
{
    let max = max_frames.min(MAX_FRAMES);
    let mut regs: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    let mut values = copy.regs.iter();
    for (r, reg) in regs.iter_mut().enumerate() {
        if copy.reg_mask & (1 << r) != 0 {
            match values.next() {
                Some(&v) => *reg = Ok(v),
                None => break,
            }
        }
    }
    let mem = Memory {
        base: copy.sp,
        data: &copy.data,
    };
    let mut out = Unwound::default();
    // Frame 0 and the frame after a signal frame are exact instruction addresses.
    let mut exact = true;
    loop {
        let pc = match regs[usize::from(RIP)] {
            Ok(pc) => pc,
            Err(why) => {
                out.stop = Some(why);
                break;
            }
        };
        if out.ips.len() >= max {
            out.stop = Some(Stop::MaxFrames);
            break;
        }
        if exact && !out.ips.is_empty() {
            out.exact.push(out.ips.len() as u32);
        }
        out.ips.push(pc);
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        match step(&mut regs, &mem, lookup, &find) {
            Ok(Step::Next { signal, fp }) => {
                exact = signal;
                out.fp_steps += u32::from(fp);
            }
            Ok(Step::Outermost) => break,
            Err(why) => {
                out.stop = Some(why);
                break;
            }
        }
    }
    out
}

/// What a step did: moved `regs` to the caller's frame (found by CFI or, `fp`, by the
/// frame-pointer chain; `signal`: the frame left was a signal frame), or found the
/// outermost frame.
enum Step {
    Next { signal: bool, fp: bool },
    Outermost,
}

fn step<'a, F>(
    regs: &mut [Reg; NREGS],
    mem: &Memory<'_>,
    lookup: u64,
    find: &F,
) -> Result<Step, Stop>
where
    F: Fn(u64) -> Option<Mapped<'a>>,
{
    let m = find(lookup).ok_or(Stop::NoMapping { address: lookup })?;
    let no_cfi = Stop::NoCfi {
        module: m.module,
        address: lookup,
    };
    let row = match m.info {
        Some(info) => {
            let vaddr = lookup
                .checked_sub(m.start)
                .filter(|_| lookup < m.end)
                .and_then(|o| o.checked_add(m.file_offset))
                .and_then(|o| info.offset_to_vaddr(o));
            match vaddr.map(|v| info.row(v)) {
                Some(Ok(row)) => Some(row),
                None | Some(Err(Miss::NoCfi)) => None,
                Some(Err(Miss::Bad)) => {
                    return Err(Stop::BadCfi {
                        module: m.module,
                        address: lookup,
                    })
                }
            }
        }
        None => None,
    };
    match row {
        Some(row) => cfi_step(regs, mem, &row, lookup, m.module),
        None => fp_step(regs, mem).ok_or(no_cfi),
    }
}

/// The caller's registers by the frame-pointer chain: `rbp` → saved `rbp` at `[rbp]`,
/// return address at `[rbp + 8]`, `rsp` = `rbp + 16`. Only when `rbp` points into the
/// copy, above the current `rsp`.
fn fp_step(regs: &mut [Reg; NREGS], mem: &Memory<'_>) -> Option<Step> {
    let rbp = *regs[usize::from(RBP)].as_ref().ok()?;
    let rsp = *regs[usize::from(RSP)].as_ref().ok()?;
    if rbp < rsp || !mem.contains(rbp, 16) {
        return None;
    }
    let mut next: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    for r in CALLEE_SAVED {
        next[usize::from(r)] = regs[usize::from(r)];
    }
    next[usize::from(RBP)] = Ok(mem.read(rbp, 8).ok()?);
    next[usize::from(RIP)] = Ok(mem.read(rbp.checked_add(8)?, 8).ok()?);
    next[usize::from(RSP)] = Ok(rbp.checked_add(16)?);
    if next[usize::from(RIP)] == Ok(0) {
        return Some(Step::Outermost);
    }
    *regs = next;
    Some(Step::Next {
        signal: false,
        fp: true,
    })
}

fn cfi_step(
    regs: &mut [Reg; NREGS],
    mem: &Memory<'_>,
    row: &Row,
    lookup: u64,
    module: u64,
) -> Result<Step, Stop> {
    let bad_cfi = Stop::BadCfi {
        module,
        address: lookup,
    };
    let get = |r: u16| -> Reg {
        regs.get(usize::from(r))
            .cloned()
            .unwrap_or(Err(Stop::MissingRegister { register: r }))
    };
    let cfa = match &row.cfa {
        Cfa::RegisterOffset(r, off) => get(*r)?.wrapping_add(*off as u64),
        Cfa::Expression(e) => evaluate(e, regs, mem, None, lookup)?,
    };
    let apply = |reg: u16, rule: &Rule| -> Reg {
        match rule {
            Rule::Undefined => Err(Stop::MissingRegister { register: reg }),
            Rule::Same => get(reg),
            Rule::Offset(n) => mem.read(cfa.wrapping_add(*n as u64), 8),
            Rule::ValOffset(n) => Ok(cfa.wrapping_add(*n as u64)),
            Rule::Register(r) => get(*r),
            Rule::Expression(e) => {
                let at = evaluate(e, regs, mem, Some(cfa), lookup)?;
                mem.read(at, 8)
            }
            Rule::ValExpression(e) => evaluate(e, regs, mem, Some(cfa), lookup),
            Rule::Constant(c) => Ok(*c),
            Rule::Unsupported => Err(Stop::UnsupportedExpression { address: lookup }),
        }
    };
    let mut next: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    for r in CALLEE_SAVED {
        next[usize::from(r)] = regs[usize::from(r)];
    }
    next[usize::from(RSP)] = Ok(cfa);
    for (reg, rule) in &row.rules {
        if *reg == row.ra {
            continue;
        }
        next[usize::from(*reg)] = apply(*reg, rule);
    }
    // The return address: its own column; undefined marks the outermost frame.
    if usize::from(row.ra) >= NREGS {
        return Err(bad_cfi);
    }
    let ra = match row.rule(row.ra) {
        Some(Rule::Undefined) => return Ok(Step::Outermost),
        Some(rule) => apply(row.ra, rule)?,
        // x86_64 CIEs always say where the return address is; without it the same value
        // would come back forever.
        None => return Err(bad_cfi),
    };
    if ra == 0 {
        return Ok(Step::Outermost);
    }
    let sp = get(RSP)?;
    let next_sp = next[usize::from(RSP)]?;
    // The caller's frame is above ours: a CFA that does not move up is a loop or garbage.
    if next_sp <= sp || cfa <= sp {
        return Err(Stop::BadCfa { cfa });
    }
    next[usize::from(RIP)] = Ok(ra);
    *regs = next;
    Ok(Step::Next {
        signal: row.signal,
        fp: false,
    })
}

/// Evaluates a CFI expression over the registers and the copy; `initial` is pushed first
/// (the CFA, for register rules).
fn evaluate(
    bytes: &[u8],
    regs: &[Reg; NREGS],
    mem: &Memory<'_>,
    initial: Option<u64>,
    lookup: u64,
) -> Result<u64, Stop> {
    let unsupported = Stop::UnsupportedExpression { address: lookup };
    let encoding = gimli::Encoding {
        address_size: 8,
        format: gimli::Format::Dwarf32,
        version: 4,
    };
    let mut e = Expression(EndianSlice::new(bytes, LittleEndian)).evaluation(encoding);
    e.set_max_iterations(EXPRESSION_STEPS);
    if let Some(v) = initial {
        e.set_initial_value(v);
    }
    let mut state = e.evaluate();
    loop {
        state = match state {
            Ok(EvaluationResult::Complete) => break,
            Ok(EvaluationResult::RequiresRegister { register, .. }) => {
                let Register(r) = register;
                let v = regs
                    .get(usize::from(r))
                    .cloned()
                    .unwrap_or(Err(Stop::MissingRegister { register: r }))?;
                e.resume_with_register(Value::Generic(v))
            }
            Ok(EvaluationResult::RequiresMemory { address, size, .. }) => {
                let v = mem.read(address, size)?;
                e.resume_with_memory(Value::Generic(v))
            }
            Ok(_) | Err(_) => return Err(unsupported),
        };
    }
    e.value_result()
        .and_then(|v| v.to_u64(u64::MAX).ok())
        .ok_or(unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(regs: &[(u16, u64)], sp: u64, data: Vec<u8>) -> UserStackCopy {
        let mut regs = regs.to_vec();
        regs.sort();
        UserStackCopy {
            reg_mask: regs.iter().fold(0, |m, (r, _)| m | 1 << r),
            regs: regs.iter().map(|(_, v)| *v).collect(),
            sp,
            data,
        }
    }

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Without tables the frame-pointer chain is followed while rbp stays in the copy,
    /// and the first rbp outside it is a "no CFI" stop naming the module.
    #[test]
    fn frame_pointer_chain_without_tables() {
        let sp = 0x7000_0000;
        // [sp]: junk, [sp+8]: saved rbp -> sp+24, [sp+16]: ra 0x1234, [sp+24]: rbp
        // outside, [sp+32]: ra 0x1300.
        let data = words(&[0xdead, sp + 24, 0x1234, 0x10, 0x1300]);
        let c = copy(&[(RIP, 0x1100), (RSP, sp), (RBP, sp + 8)], sp, data);
        let find = |a: u64| {
            (0x1000..0x2000).contains(&a).then_some(Mapped {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
                info: None,
                module: 9,
            })
        };
        let u = unwind(&c, find, 100);
        assert_eq!(u.ips, [0x1100, 0x1234, 0x1300]);
        assert_eq!(u.fp_steps, 2);
        assert_eq!(
            u.stop,
            Some(Stop::NoCfi {
                module: 9,
                address: 0x12ff
            })
        );
    }

    #[test]
    fn no_rip_is_a_missing_register() {
        let u = unwind(&copy(&[(RSP, 8)], 8, vec![]), |_| None, 10);
        assert!(u.ips.is_empty());
        assert_eq!(u.stop, Some(Stop::MissingRegister { register: RIP }));
        let u = unwind(&copy(&[(RIP, 8)], 8, vec![]), |_| None, 10);
        assert_eq!(u.ips, [8]);
        assert_eq!(u.stop, Some(Stop::NoMapping { address: 8 }));
    }

    #[test]
    fn memory_reads_are_bounded() {
        let m = Memory {
            base: u64::MAX - 4,
            data: &[1, 2, 3, 4],
        };
        assert!(m.read(u64::MAX - 4, 8).is_err());
        assert_eq!(m.read(u64::MAX - 4, 4), Ok(0x0403_0201));
        assert!(m.read(u64::MAX, 8).is_err());
        assert!(m.read(0, 8).is_err());
        assert!(m.read(u64::MAX - 4, 0).is_err());
        assert!(!m.contains(u64::MAX - 4, 16));
        assert!(m.contains(u64::MAX - 4, 4));
    }
}
