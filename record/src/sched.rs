//! How ebrec's own threads are scheduled (`--sched`). A recorder on a busy server costs it
//! more than its CPU time when it wakes at the wrong moment: with the normal policy, a woken
//! ebrec thread may preempt the server's thread at once (a lock holder, with every waiter
//! behind it). `batch` (the default) keeps ebrec's fair share of CPU but never preempts at a
//! wakeup: it waits for the running thread's slice or the next tick (the kernel's
//! `check_preempt_wakeup_fair`: batch and idle tasks do not preempt). `idle` runs only on a
//! CPU nothing else wants: on a saturated machine the ring buffers then fill and their
//! events are lost, counted. The launched command is started before this is applied, so it
//! keeps the policy it was given.
use crate::config::SchedPolicy;

/// The policy for every thread of this process now (threads started later inherit it from
/// the thread that starts them), and a timer slack of 1 ms for the calling thread (the
/// loop's sleeps of 10-100 ms may then end with other timers). The threads it could not
/// change, with the error, or None.
pub(crate) fn apply(p: SchedPolicy) -> Option<String> {
    let policy = match p {
        SchedPolicy::Normal => return None,
        SchedPolicy::Batch => libc::SCHED_BATCH,
        SchedPolicy::Idle => libc::SCHED_IDLE,
    };
    // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000_000u64, 0, 0, 0) };
    let tasks = match std::fs::read_dir("/proc/self/task") {
        Ok(d) => d,
        Err(e) => return Some(format!("/proc/self/task: {e}")),
    };
    let mut failed = None;
    for tid in tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a thread id of this process and a valid sched_param.
        if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 {
            failed.get_or_insert_with(|| {
                format!("thread {tid}: {}", std::io::Error::last_os_error())
            });
        }
    }
    failed
}

/// The context switches of every thread of this process so far (getrusage: voluntary,
/// waiting for something, and involuntary, preempted).
pub(crate) fn own_switches() -> u64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_nvcsw + ru.ru_nivcsw).max(0) as u64
}

/// `--sched`'s word for a policy.
pub(crate) fn name(p: SchedPolicy) -> &'static str {
    match p {
        SchedPolicy::Batch => "batch",
        SchedPolicy::Idle => "idle",
        SchedPolicy::Normal => "normal",
    }
}
