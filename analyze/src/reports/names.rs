//! The names reports print for the values of events: syscalls (by the recording host's
//! architecture), block devices and ops, probed functions, TCP and task states, lock
//! sources, memory-growth kinds. A leaf: it uses no other report module.
use crate::model::Loaded;
use ebtrace_format::proto::{LockSource, MemGrowthKind};

/// The name of syscall `nr` on `arch` (the trace header's, `uname -m`).
pub fn syscall_name(arch: &str, nr: u64) -> String {
    let name = match arch {
        "aarch64" => syscalls::aarch64::Sysno::new(nr as usize).map(|s| s.name()),
        _ => syscalls::x86_64::Sysno::new(nr as usize).map(|s| s.name()),
    };
    name.map_or_else(|| format!("syscall_{nr}"), str::to_string)
}

/// A block request's op (REQ_OP_*), as blktrace spells it.
pub fn bio_op_name(op: u32) -> &'static str {
    match op & 0xff {
        0 => "read",
        1 => "write",
        2 => "flush",
        3 => "discard",
        5 => "secure-erase",
        7 => "zone-append",
        9 => "write-zeroes",
        _ => "other",
    }
}

/// The names of a request's BioFlag bits, e.g. "sync,fua".
pub fn bio_flags_text(flags: u32) -> String {
    use ebtrace_format::proto::BioFlag as F;
    let names = [
        (F::Sync, "sync"),
        (F::Meta, "meta"),
        (F::Fua, "fua"),
        (F::Preflush, "preflush"),
        (F::Readahead, "readahead"),
    ];
    names
        .iter()
        .filter(|(f, _)| flags & *f as u32 != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

/// "vda" for a device the trace names, else "MAJ:MIN".
pub fn device_name(l: &Loaded, dev: u32) -> String {
    match l.block_devices.get(&dev) {
        Some(d) if !d.name.is_empty() => d.name.clone(),
        _ => format!("{}:{}", dev >> 20, dev & 0xfffff),
    }
}

/// The device and op of a [`bio_key`](crate::event::bio_key): "vda write".
pub(crate) fn bio_name(l: &Loaded, key: u64) -> String {
    format!(
        "{} {}",
        device_name(l, (key >> 8) as u32),
        bio_op_name(key as u32)
    )
}

/// The demangled name of the `--func` function `id`, if the trace says.
pub(crate) fn probed_name(l: &Loaded, id: u64) -> Option<String> {
    l.probed.get(&id).map(|&n| l.tables.string(n).into_owned())
}

/// [`probed_name`], or "function ID" when the trace does not say.
pub(crate) fn function_name(l: &Loaded, id: u64) -> String {
    probed_name(l, id).unwrap_or_else(|| format!("function {id}"))
}

/// A --usdt probe's name, `provider:name` ("usdt N" when the trace does not describe it).
pub(crate) fn usdt_name(l: &Loaded, id: u64) -> String {
    match l.usdt_probes.get(&id) {
        Some(p) => format!(
            "{}:{}",
            l.tables.string(p.provider),
            l.tables.string(p.name)
        ),
        None => format!("usdt {id}"),
    }
}

/// The kernel's TCP state names (include/net/tcp_states.h).
pub fn tcp_state_name(s: u32) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "UNKNOWN",
    }
}

/// A task state at a block (TASK_INTERRUPTIBLE, …), as `ps` letters it.
pub(crate) fn task_state_name(state: u32) -> String {
    match state {
        0 => "R (running)".into(),
        1 => "S (interruptible)".into(),
        2 => "D (uninterruptible)".into(),
        s if s & 2 != 0 => format!("D (uninterruptible, {s:#x})"),
        s if s & 1 != 0 => format!("S (interruptible, {s:#x})"),
        s => format!("{s:#x}"),
    }
}

/// How a lock wait was recorded.
pub(crate) fn lock_source_name(s: LockSource) -> &'static str {
    match s {
        LockSource::Futex => "futex",
        LockSource::Uprobe => "uprobe",
        _ => "unspecified",
    }
}

/// A memory-growth event's kind.
pub(crate) fn memgrowth_name(k: MemGrowthKind) -> &'static str {
    match k {
        MemGrowthKind::Brk => "brk",
        MemGrowthKind::Mmap => "mmap",
        MemGrowthKind::Munmap => "munmap",
        MemGrowthKind::PageFault => "page fault",
        _ => "memgrowth",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(syscall_name("x86_64", 110), "getppid");
        assert_eq!(syscall_name("x86_64", 74), "fsync");
        assert_eq!(syscall_name("x86_64", 35), "nanosleep");
        assert_eq!(syscall_name("aarch64", 82), "fsync");
        assert_eq!(syscall_name("x86_64", 100_000), "syscall_100000");
        assert_eq!(bio_op_name(1), "write");
        assert_eq!(bio_flags_text(1 | 4), "sync,fua");
        assert_eq!(tcp_state_name(2), "SYN_SENT");
        assert_eq!(task_state_name(2), "D (uninterruptible)");
        assert_eq!(memgrowth_name(MemGrowthKind::PageFault), "page fault");
    }
}
