//! What the running kernel can do, decided in one place: its version, uprobe sessions, the
//! tracepoints its BTF has. The recorder picks its programs by these; `ebrec doctor` reports
//! them with the same functions and the same minimum versions (docs/kernels.md).
use crate::procfs;

/// The oldest kernel ebrec runs on: BPF ring buffers and CAP_BPF.
pub const MIN_KERNEL: (u32, u32) = (5, 8);
/// Uprobe sessions (BPF_TRACE_UPROBE_SESSION): the allocator's return probe only for the
/// calls kept at entry.
pub const UPROBE_SESSIONS: (u32, u32) = (6, 13);

/// Major and minor of a kernel release such as `6.18.44-fc-v657`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The running kernel's major and minor (None when its release does not say).
pub fn running_version() -> Option<(u32, u32)> {
    static V: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *V.get_or_init(|| kernel_version(&procfs::uname().1))
}

/// Whether the kernel has uprobe sessions.
pub fn uprobe_sessions() -> bool {
    running_version().is_some_and(|v| v >= UPROBE_SESSIONS)
}

/// Whether the running kernel's BTF has a type of this name (a tracepoint `T` exists for
/// tp_btf when `btf_trace_T` does).
pub fn has_btf_type(name: &str) -> bool {
    static BTF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let b = BTF.get_or_init(|| std::fs::read("/sys/kernel/btf/vmlinux").unwrap_or_default());
    let needle = format!("{name}\0");
    memchr::memmem::find(b, needle.as_bytes()).is_some()
}

/// Whether off-CPU and the run queue take a kept event's user stack where the thread
/// returns to user space after its switch, on the rseq_update tracepoint (the kernel fires
/// it there for threads with restartable sequences: every thread of glibc 2.35 and later),
/// instead of at its next syscall exit, which puts every system call of the machine on the
/// tracepoint's slow path. Threads without rseq bring the syscall exit back while recording
/// (see `Probes::rseq_fallbacks`). `EBTRACE_OFFCPU_SYS_EXIT=1` uses the syscall exit from
/// the start, so that both ways are tested on one kernel.
pub fn rseq_update() -> bool {
    std::env::var_os("EBTRACE_OFFCPU_SYS_EXIT").is_none_or(|v| v != "1")
        && has_btf_type("btf_trace_rseq_update")
}

#[cfg(test)]
mod tests {
    use super::kernel_version;

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("5"), None);
        assert_eq!(kernel_version("weird"), None);
    }
}
