//! Where a stack is, in a word: the service's function it is in, the kernel function it
//! blocks in, whether a wake came from an interrupt, what kind of lock it waits for. What
//! the summary, the exports and the lock rows call a stack. A leaf: it uses no other
//! report module.
use crate::interned::FrameView;
use crate::model::Frame;

/// Whether a frame's module is the system's C and C++ runtime (libc, the loader,
/// libstdc++, libm, libgcc, the vDSO): code a service calls, not its own.
pub(crate) fn runtime(module: &str) -> bool {
    const RUNTIME: &[&str] = &[
        "libc.so",
        "libc-",
        "ld-linux",
        "ld64.so",
        "libstdc++",
        "libm.so",
        "libpthread",
        "libgcc_s",
        "libdl",
        "librt",
        "[vdso]",
        "[uprobes]",
    ];
    let file = module.rsplit('/').next().unwrap_or(module);
    RUNTIME.iter().any(|r| file.starts_with(r))
}

/// A demangled name without its parameters.
pub(crate) fn short(name: &str) -> &str {
    name.split('(').next().unwrap_or(name)
}

/// Whether a frame is the kernel's or a kernel module's.
pub(crate) fn is_kernel<F: FrameView>(f: &F) -> bool {
    f.module().starts_with("[kernel")
}

/// The user function a stack is "in": its first user frame outside the C and C++ runtime
/// (the service's own code), else its first user frame, else its first frame.
pub(crate) fn user_place(frames: &[Frame]) -> String {
    let user = || frames.iter().filter(|f| !f.module.starts_with("[kernel"));
    // (An inlined frame of a system header, std::mutex's __gthread_mutex_lock, is the
    // runtime's too.)
    let system_header = |f: &Frame| {
        f.file
            .as_deref()
            .is_some_and(|p| p.starts_with("/usr/include/"))
    };
    user()
        .find(|f| !runtime(&f.module) && !system_header(f))
        .or_else(|| user().next())
        .or_else(|| frames.first())
        .map_or_else(
            || "(no stack)".to_string(),
            |f| short(&f.function).to_string(),
        )
}

/// "LEAF in PLACE" for a sample's stack: the function on the CPU, and the service's
/// function it was called from when that is another.
pub(crate) fn leaf_in_place(frames: &[Frame]) -> String {
    let place = user_place(frames);
    match frames.first().map(|f| short(&f.function)) {
        Some(leaf) if leaf != place => format!("{leaf} in {place}"),
        _ => place,
    }
}

/// The leaf function of a stack without its parameters: what a CPU sample is named after.
pub(crate) fn leaf(frames: &[Frame]) -> String {
    frames
        .first()
        .map_or_else(|| "(no stack)".into(), |f| short(&f.function).to_string())
}

/// The first of `frames` that is not the scheduler itself: where a block waits.
fn waiting<'a>(mut frames: impl Iterator<Item = &'a Frame>) -> Option<String> {
    frames
        .find(|f| {
            let n = f.function.as_str();
            !(n.contains("schedule") || n.starts_with("__traceiter") || n == "finish_task_switch")
        })
        .map(|f| f.function.clone())
}

/// The kernel function a blocked stack waits in: the first kernel frame (of the kernel or
/// of a module) that is not the scheduler itself.
pub(crate) fn kernel_place(frames: &[Frame]) -> Option<String> {
    waiting(frames.iter().filter(is_kernel))
}

/// [`kernel_place`] among the core kernel's frames only, not a module's: what the summary
/// names.
pub(crate) fn core_kernel_place(frames: &[Frame]) -> Option<String> {
    waiting(frames.iter().filter(|f| f.module == "[kernel]"))
}

/// Whether a waker's stack is an interrupt's (a timer, a device, a softirq run at the
/// interrupt's exit): the recorder's waker tid is then whichever thread the interrupt
/// happened to run on, not a thread that woke the block.
pub(crate) fn interrupt_wake(waker_frames: &[Frame]) -> bool {
    waker_frames.iter().filter(is_kernel).any(|f| {
        let n = f.function.as_str();
        n.contains("interrupt")
            || n.contains("softirq")
            || n.starts_with("asm_sysvec_")
            || n.starts_with("sysvec_")
            || n.starts_with("__sysvec_")
            || n.starts_with("irq_exit")
    })
}

/// The stack as text lines, leaf first: `Frame::display` ("function (file:line)",
/// "lib.so+0x1234" when unnamed, kernel frames marked).
pub(crate) fn stack_lines(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(Frame::display).collect()
}

/// What a contended lock is, from its waiter's stack and futex op: "mutex", "condvar" or
/// "other".
pub(crate) fn lock_kind<F: FrameView>(frames: &[F], futex_op: u32) -> &'static str {
    let has = |s: &str| frames.iter().any(|f| f.function().contains(s));
    if has("pthread_cond_") || has("condition_variable") {
        "condvar"
    } else if has("lll_lock") || has("pthread_mutex_") || has("mutex::lock") {
        "mutex"
    } else {
        // glibc: mutexes wait with FUTEX_WAIT (or LOCK_PI), condition variables with
        // FUTEX_WAIT_BITSET.
        match futex_op {
            0 | 6 | 13 => "mutex",
            9 => "condvar",
            _ => "other",
        }
    }
}

/// Whether a futex op is a mutex's wait: FUTEX_WAIT (glibc's `__lll_lock_wait`),
/// FUTEX_LOCK_PI, FUTEX_LOCK_PI2.
pub(crate) fn mutex_op(futex_op: u32) -> bool {
    matches!(futex_op, 0 | 6 | 13)
}

/// Whether a futex op is a condition variable's wait for its signal: FUTEX_WAIT_BITSET
/// (glibc's condvars since 2.25), FUTEX_WAIT_REQUEUE_PI (a PI mutex's condvar).
pub(crate) fn condvar_op(futex_op: u32) -> bool {
    matches!(futex_op, 9 | 11)
}

/// What a lock wait waits for, finer than [`lock_kind`]: "mutex" (a mutex another thread
/// holds), "condvar" (a condition variable's signal), "condvar_mutex" (a condition
/// variable's mutex, reacquired after the signal while another thread held it), "other".
/// `futex_op`: None when not known (counted in the kernel, --aggregate: the frames
/// decide); `uprobe`: recorded by the pthread_mutex_lock probes (a mutex, whatever the
/// stack); `after_condvar`: the same thread's previous wait was a condvar's, ended just
/// before this one began (see `StackSink`).
pub(crate) fn wait_kind<F: FrameView>(
    frames: &[F],
    futex_op: Option<u32>,
    uprobe: bool,
    after_condvar: bool,
) -> &'static str {
    if uprobe {
        return "mutex";
    }
    let has = |s: &str| frames.iter().any(|f| f.function().contains(s));
    // pthread_join waits with FUTEX_WAIT_BITSET too: not a lock.
    if has("pthread_join") || has("pthread_clockjoin") || has("pthread_timedjoin") {
        return "other";
    }
    let relock = has("lll_lock") || has("mutex_cond_lock");
    match (lock_kind(frames, futex_op.unwrap_or(u32::MAX)), futex_op) {
        ("condvar", Some(op)) if after_condvar || mutex_op(op) => "condvar_mutex",
        ("condvar", None) if after_condvar || relock => "condvar_mutex",
        ("condvar", _) => "condvar",
        ("mutex", _) if after_condvar => "condvar_mutex",
        (k, _) => k,
    }
}
