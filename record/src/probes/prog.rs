//! What the kernel says of one loaded program (its info, its run time and runs), and the
//! system call loop that the chain's calibration and the dispatch cost are timed on: the
//! leaf that `chain` and `stats` both read.
use std::os::fd::AsRawFd;

/// ns per getppid system call in a loop here (the least of 40 rounds of 2,000).
pub(super) fn time_syscalls() -> f64 {
    // Many short loops (about half a millisecond each), their best: a loop that a switch
    // or an interrupt stretched is not the best, and on a busy machine (the load ebrec
    // is started under) a long loop seldom runs undisturbed. Five loops of 20,000 once
    // measured 547 ns a run where the truth was about 50.
    const N: u32 = 2_000;
    let mut best = f64::MAX;
    for _ in 0..40 {
        let t = std::time::Instant::now();
        for _ in 0..N {
            // SAFETY: getppid has no arguments and no preconditions.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(N));
    }
    best
}

/// A loaded program's kernel info (its run time, runs and recursion misses among it).
pub(super) fn prog_info(
    fd: std::os::fd::BorrowedFd<'_>,
) -> Option<libbpf_rs::libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a valid out buffer of len bytes.
    let r = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len)
    };
    (r == 0).then_some(info)
}

/// A loaded program's kernel stats: (run time ns, runs).
pub(super) fn prog_run_stats(fd: std::os::fd::BorrowedFd<'_>) -> (u64, u64) {
    prog_info(fd).map_or((0, 0), |i| (i.run_time_ns, i.run_cnt))
}
