//! Idle waits: off-CPU blocks and lock waits that are a thread waiting for work (an event
//! loop in epoll, a listener in accept, a connection waiting for its client's next
//! request, a thread pool's worker waiting for a task, a timer thread waiting for its next
//! timer). They are true and rarely a finding: `top --kind offcpu|lock`, `ebsym locks`
//! and the summary show them apart, after the waits inside work, each with the rule that
//! decided ([`IdleRules::classify`]).
//!
//! The rules are data: [`DEFAULT_SHAPES`], a list of wait shapes, each a reason and a
//! match on the frames' function names (demangled, as the reports show them), plus the
//! user's `--idle PATTERN`s ([`IdleRules::add_pattern`]). A stack's frames are leaf first:
//! the kernel frames innermost first, then the user frames from the leaf to the thread's
//! start. The first rule that matches decides; the user's come first.
//!
//! Patterns are globs (`*` any run of characters, `?` one, the same as `leaks
//! --suppress`), matched against the whole function name and against it without its
//! parameters (`Pool::get_task(int)` matches `*::get_task`).
//!
//! A lock wait for a mutex another thread holds (`wait_kind` mutex or condvar_mutex,
//! [`super::places::wait_kind`]) is contention, never idle: no rule, not even the user's,
//! makes it idle.
use super::places::{is_kernel, runtime, short};
use super::suppress::glob;
use crate::error::{Error, ErrorKind};
use crate::interned::FrameView;
use crate::model::Frame;

/// What a default shape asks of a stack.
#[derive(Debug, Clone, Copy)]
pub enum Match {
    /// Some frame (kernel or user) is one of these functions.
    Any(&'static [&'static str]),
    /// Some frame is one of `wait` and a user frame further from the leaf (a caller) is
    /// one of `under`; no frame nearer the leaf than the wait is a mutex lock (`*lll_lock*`,
    /// `*mutex_cond_lock*`, `*pthread_mutex_*lock*`: a condvar's mutex reacquired after
    /// the signal, contention rather than waiting).
    Under {
        wait: &'static [&'static str],
        under: &'static [&'static str],
    },
    /// Some frame is one of `wait`, and no user frame further from the leaf (a caller) is
    /// a lock acquisition ([`LOCK_WAITS`]): an event loop's epoll or poll is idle, the same
    /// wait inside a lock's sleep (PostgreSQL waits for a row lock in `ProcSleep` →
    /// `WaitLatch` → `epoll_wait`) is contention.
    NotInLock(&'static [&'static str]),
    /// A socket read at the top of a connection loop: some frame is one of `read`; then,
    /// walking the user frames from the leaf outwards and skipping the C/C++ runtime's
    /// frames (libc, libstdc++, …) and the read helpers (a name with `read`, `recv` or
    /// `receive` in it, any case), the first other frame (the function that waits for
    /// input) is one of `loop_`: the read is the one the loop starts each request with.
    /// A read further down, inside a request (`handle_request` → `fetch` → `recv`), is
    /// not idle: its first other frame is `fetch`.
    LoopRead {
        read: &'static [&'static str],
        loop_: &'static [&'static str],
    },
}

/// A default wait shape: the reason it gives and what it matches.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// What the reports say: "epoll wait".
    pub reason: &'static str,
    pub matches: Match,
}

/// Condition-variable waits, as the frames name them.
const CONDVAR_WAIT: &[&str] = &[
    "*condition_variable*::wait*",
    "*condition_variable_any*::wait*",
    "*pthread_cond_wait*",
    "*pthread_cond_timedwait*",
    "*pthread_cond_clockwait*",
];

/// Functions that acquire a lock or sleep until one is granted, as servers name them: an
/// epoll or poll wait under one of them is a lock wait, not idle ([`Match::NotInLock`]), and the summary names the wait after them
/// ([`lock_place`]).
pub(crate) const LOCK_WAITS: &[&str] = &[
    "*LockAcquire*",
    "*lock_acquire*",
    "*AcquireLock*",
    "*acquire_lock*",
    "*WaitOnLock*",
    "*LockTableWait*",
    "*LockWait*",
    "*lock_wait*",
    "ProcSleep",
    "*Mutex*::*ock*",
    "*mutex*lock*",
];

/// Where a wait inside a lock acquisition is, named after the lock: the outermost user frame
/// that is a [`LOCK_WAITS`] function and the named function that called it ("XactLockTableWait
/// from heapam_tuple_lock" for a PostgreSQL row lock, whose leaf frames are the generic
/// WaitEventSetWait, WaitLatch and ProcSleep); None when no frame acquires a lock.
pub(crate) fn lock_place(frames: &[Frame]) -> Option<String> {
    let user: Vec<&Frame> = frames.iter().filter(|f| !is_kernel(f)).collect();
    // the service's own functions only: pthread_mutex_lock, or std::mutex::lock inlined
    // from a system header, are the runtime's (the place is then the caller, as before)
    let system_header = |f: &Frame| {
        f.file
            .as_deref()
            .is_some_and(|p| p.starts_with("/usr/include/"))
    };
    let matches = |f: &Frame| {
        !runtime(&f.module)
            && !system_header(f)
            && LOCK_WAITS.iter().any(|p| glob(p, short(&f.function)))
    };
    let i = user.iter().rposition(|f| matches(f))?;
    let lock = short(&user[i].function).to_string();
    // the caller: the next frame out with a name (not an address `module+0x…`)
    let caller = user[i + 1..]
        .iter()
        .find(|f| !runtime(&f.module) && !f.function.contains("+0x"))
        .map(|f| short(&f.function).to_string());
    Some(match caller {
        Some(c) => format!("{lock} from {c}"),
        None => lock,
    })
}

/// The default wait shapes, in the order they are tried.
pub const DEFAULT_SHAPES: &[Shape] = &[
    Shape {
        reason: "accept wait",
        matches: Match::Any(&[
            "inet_csk_accept",
            "inet_accept",
            "unix_accept",
            "accept",
            "accept4",
            "*libc_accept*",
        ]),
    },
    Shape {
        reason: "epoll wait",
        matches: Match::NotInLock(&[
            "do_epoll_wait",
            "ep_poll",
            "*epoll_wait",
            "*epoll_pwait",
            "*epoll_pwait2",
        ]),
    },
    Shape {
        reason: "poll wait",
        matches: Match::NotInLock(&[
            "do_sys_poll",
            "do_select",
            "core_sys_select",
            "poll",
            "ppoll",
            "select",
            "pselect",
            "__poll",
            "*libc_poll*",
        ]),
    },
    Shape {
        reason: "idle connection read",
        matches: Match::LoopRead {
            read: &[
                "tcp_recvmsg",
                "tcp_recvmsg_locked",
                "sk_wait_data",
                "unix_stream_read_generic",
                "unix_stream_data_wait",
            ],
            loop_: &[
                "*serve*",
                "*Serve*",
                "*loop*",
                "*Loop*",
                "*handle_connection*",
                "*HandleConnection*",
                "*handle_client*",
                "*HandleClient*",
                "*connection_thread*",
                "*ConnectionThread*",
                "*Connection::run",
                "*Connection::Run",
                "*Session::run",
                "*Session::Run",
            ],
        },
    },
    Shape {
        reason: "thread pool waiting for a task",
        matches: Match::Under {
            wait: CONDVAR_WAIT,
            under: &[
                "*ThreadPool*",
                "*thread_pool*",
                "*WorkQueue*",
                "*work_queue*",
                "*::get_task*",
                "*::GetTask*",
                "*::next_task*",
                "*::NextTask*",
                "*BlockingQueue*::pop*",
                "*BlockingQueue*::take*",
                "*Queue*::pop*",
                "*Queue*::Pop*",
                "*Queue*::wait*",
                "*Queue*::Wait*",
            ],
        },
    },
    Shape {
        reason: "timer thread waiting for its next timer",
        matches: Match::Under {
            wait: &[
                "hrtimer_nanosleep",
                "do_nanosleep",
                "*nanosleep",
                "*sleep_for*",
                "*sleep_until*",
                "usleep",
                "sleep",
                "futex_wait*",
                "*pthread_cond_timedwait*",
                "*pthread_cond_clockwait*",
                "*condition_variable*::wait_for*",
                "*condition_variable*::wait_until*",
                "*condition_variable*::__wait_until_impl*",
            ],
            under: &["*timer*", "*Timer*"],
        },
    },
];

/// The rules a report classifies waits with: the user's patterns, then (unless turned
/// off) [`DEFAULT_SHAPES`].
#[derive(Debug, Clone)]
pub struct IdleRules {
    /// `--idle` patterns, in the order given.
    patterns: Vec<String>,
    defaults: bool,
}

impl Default for IdleRules {
    fn default() -> Self {
        IdleRules {
            patterns: Vec::new(),
            defaults: true,
        }
    }
}

/// Whether `name` (a frame's function) matches the glob `pattern`: the whole name, or the
/// name without its parameters.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    glob(pattern, name) || {
        let s = short(name);
        s.len() != name.len() && glob(pattern, s)
    }
}

fn any_of(patterns: &[&str], name: &str) -> bool {
    patterns.iter().any(|p| name_matches(p, name))
}

/// Whether a frame is a mutex lock (a condvar's mutex reacquired after the signal).
fn mutex_lock(name: &str) -> bool {
    any_of(
        &[
            "*lll_lock*",
            "*mutex_cond_lock*",
            "*pthread_mutex_lock*",
            "*pthread_mutex_timedlock*",
            "*pthread_mutex_clocklock*",
        ],
        name,
    )
}

fn read_helper(name: &str) -> bool {
    let s = short(name).to_ascii_lowercase();
    // The last component only: `Conn::read_request` is a helper, `Reader::serve` is not.
    let last = s.rsplit("::").next().unwrap_or(&s);
    ["read", "recv", "receive"].iter().any(|h| last.contains(h))
}

impl Match {
    /// Whether `frames` (leaf first) have this shape.
    pub fn matches<F: FrameView>(&self, frames: &[F]) -> bool {
        match *self {
            Match::Any(names) => frames.iter().any(|f| any_of(names, f.function())),
            Match::NotInLock(wait) => {
                let Some(i) = frames.iter().position(|f| any_of(wait, f.function())) else {
                    return false;
                };
                !frames[i + 1..]
                    .iter()
                    .any(|f| !is_kernel(f) && any_of(LOCK_WAITS, f.function()))
            }
            Match::Under { wait, under } => {
                let Some(i) = frames.iter().position(|f| any_of(wait, f.function())) else {
                    return false;
                };
                !frames[..i].iter().any(|f| mutex_lock(f.function()))
                    && frames[i + 1..]
                        .iter()
                        .any(|f| !is_kernel(f) && any_of(under, f.function()))
            }
            Match::LoopRead { read, loop_ } => {
                frames.iter().any(|f| any_of(read, f.function()))
                    && frames
                        .iter()
                        .filter(|f| !is_kernel(f))
                        .find(|f| {
                            !runtime(f.module())
                                && !f.file().is_some_and(|p| p.starts_with("/usr/include/"))
                                && !read_helper(f.function())
                        })
                        .is_some_and(|f| any_of(loop_, short(f.function())))
            }
        }
    }
}

impl IdleRules {
    /// The default shapes only.
    pub fn defaults() -> IdleRules {
        IdleRules::default()
    }

    /// No rule at all (`--no-idle-rules`): no wait is idle, but by the user's patterns.
    pub fn none() -> IdleRules {
        IdleRules {
            patterns: Vec::new(),
            defaults: false,
        }
    }

    /// Adds a user's pattern (`--idle PATTERN`): a wait is idle, "--idle PATTERN", when
    /// any frame's function matches the glob.
    pub fn add_pattern(&mut self, pattern: &str) -> Result<(), Error> {
        if pattern.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::EmptyPattern,
                "--idle: an empty pattern",
            ));
        }
        self.patterns.push(pattern.to_string());
        Ok(())
    }

    /// Why a wait under `frames` (leaf first) is idle, if a rule says it is; `contended`:
    /// a lock wait for a mutex another thread holds (never idle).
    pub fn classify<F: FrameView>(&self, frames: &[F], contended: bool) -> Option<String> {
        if contended {
            return None;
        }
        for p in &self.patterns {
            if frames.iter().any(|f| name_matches(p, f.function())) {
                return Some(format!("--idle {p}"));
            }
        }
        if !self.defaults {
            return None;
        }
        DEFAULT_SHAPES
            .iter()
            .find(|s| s.matches.matches(frames))
            .map(|s| s.reason.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(function: &str) -> Frame {
        Frame {
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
            module: "[kernel]".into(),
            address: "0x1".into(),
        }
    }

    fn u(function: &str) -> Frame {
        Frame {
            function: function.into(),
            file: Some("srv.cpp".into()),
            line: Some(1),
            inlined: false,
            module: "/srv/app".into(),
            address: "0x2".into(),
        }
    }

    fn libc(function: &str) -> Frame {
        Frame {
            module: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            file: None,
            ..u(function)
        }
    }

    fn why(frames: &[Frame]) -> Option<String> {
        IdleRules::default().classify(frames, false)
    }

    #[test]
    fn the_default_shapes() {
        let sched = || k("schedule");
        let epoll = [
            sched(),
            k("ep_poll"),
            k("do_epoll_wait"),
            libc("epoll_wait"),
            u("EventLoop::run()"),
        ];
        assert_eq!(why(&epoll).as_deref(), Some("epoll wait"));
        let accept = [
            sched(),
            k("inet_csk_accept"),
            k("inet_accept"),
            libc("accept"),
            u("Listener::next()"),
        ];
        assert_eq!(why(&accept).as_deref(), Some("accept wait"));
        let poll = [sched(), k("do_sys_poll"), libc("poll"), u("vio_io_wait")];
        assert_eq!(why(&poll).as_deref(), Some("poll wait"));
        // A socket read at the top of the connection loop: idle.
        let top_read = [
            sched(),
            k("sk_wait_data"),
            k("tcp_recvmsg"),
            libc("recv"),
            u("Conn::read_request(Request&)"),
            u("serve_client(int)"),
        ];
        assert_eq!(why(&top_read).as_deref(), Some("idle connection read"));
        // A read inside a request, waiting for a backend: not idle.
        let in_request = [
            sched(),
            k("sk_wait_data"),
            k("tcp_recvmsg"),
            libc("recv"),
            u("Backend::fetch(Key const&)"),
            u("handle_request(Request&)"),
            u("serve_client(int)"),
        ];
        assert_eq!(why(&in_request), None);
        let pool = [
            sched(),
            k("futex_wait"),
            libc("pthread_cond_wait"),
            u("std::condition_variable::wait(std::unique_lock<std::mutex>&)"),
            u("pool::ThreadPool::get_task()"),
            u("pool::ThreadPool::worker_loop()"),
        ];
        assert_eq!(
            why(&pool).as_deref(),
            Some("thread pool waiting for a task")
        );
        // The pool's mutex reacquired after the signal: contention, not idle.
        let reacquire = [
            sched(),
            k("futex_wait"),
            libc("__lll_lock_wait"),
            libc("__pthread_mutex_cond_lock"),
            libc("pthread_cond_wait"),
            u("std::condition_variable::wait(std::unique_lock<std::mutex>&)"),
            u("pool::ThreadPool::get_task()"),
        ];
        assert_eq!(why(&reacquire), None);
        // A condvar wait outside any pool or queue: not idle.
        let cv = [
            sched(),
            k("futex_wait"),
            libc("pthread_cond_wait"),
            u("std::condition_variable::wait(std::unique_lock<std::mutex>&)"),
            u("Ledger::wait_for_commit()"),
        ];
        assert_eq!(why(&cv), None);
        let timer = [
            sched(),
            k("do_nanosleep"),
            k("hrtimer_nanosleep"),
            libc("clock_nanosleep"),
            u("timers::TimerWheel::run()"),
        ];
        assert_eq!(
            why(&timer).as_deref(),
            Some("timer thread waiting for its next timer")
        );
        // A sleep elsewhere is not a timer's: the kernel's hrtimer frames do not count as
        // the caller.
        let nap = [
            sched(),
            k("do_nanosleep"),
            k("hrtimer_nanosleep"),
            libc("clock_nanosleep"),
            u("Retry::backoff()"),
        ];
        assert_eq!(why(&nap), None);
    }

    #[test]
    fn user_patterns_come_first_and_contention_is_never_idle() {
        let mut r = IdleRules::none();
        let cv = [
            k("futex_wait"),
            u("std::condition_variable::wait(std::unique_lock<std::mutex>&)"),
            u("Ledger::wait_for_commit()"),
        ];
        assert_eq!(r.classify(&cv, false), None);
        r.add_pattern("Ledger::wait_for_*").unwrap();
        assert_eq!(
            r.classify(&cv, false).as_deref(),
            Some("--idle Ledger::wait_for_*")
        );
        assert_eq!(r.classify(&cv, true), None);
        assert!(r.add_pattern(" ").is_err());
        // --no-idle-rules: the default shapes are off.
        let epoll = [k("ep_poll"), u("EventLoop::run()")];
        assert_eq!(IdleRules::none().classify(&epoll, false), None);
    }

    /// A wait inside a lock acquisition is named after the lock and its caller; the
    /// runtime's own locking (pthread_mutex_lock) names nothing.
    #[test]
    fn a_lock_wait_is_named_after_the_lock() {
        let row_lock = [
            k("do_epoll_wait"),
            libc("epoll_wait"),
            u("WaitEventSetWait"),
            u("WaitLatch"),
            u("ProcSleep"),
            u("postgres+0x45f000"),
            u("LockAcquireExtended"),
            u("XactLockTableWait"),
            u("postgres+0x1e8646"),
            u("heapam_tuple_lock"),
            u("PostgresMain"),
        ];
        assert_eq!(
            lock_place(&row_lock).as_deref(),
            Some("XactLockTableWait from heapam_tuple_lock")
        );
        let mutex = [
            k("futex_wait"),
            libc("__lll_lock_wait"),
            libc("pthread_mutex_lock"),
            u("Ledger::post(int)"),
        ];
        assert_eq!(lock_place(&mutex), None);
    }

    /// epoll under a lock's sleep is contention; at the top of a read, idle.
    #[test]
    fn an_epoll_wait_in_a_lock_sleep_is_not_idle() {
        // PostgreSQL (function names from its .dynsym): a backend waiting for its
        // client's next query, and one waiting for a row lock another holds, both in
        // epoll_wait under WaitEventSetWait.
        let client = [
            k("ep_poll"),
            k("do_epoll_wait"),
            libc("epoll_wait"),
            u("WaitEventSetWait"),
            u("secure_read"),
            u("pq_recvbuf"),
            u("pq_getbyte"),
            u("PostgresMain"),
        ];
        assert_eq!(
            IdleRules::defaults().classify(&client, false).as_deref(),
            Some("epoll wait")
        );
        let row_lock = [
            k("ep_poll"),
            k("do_epoll_wait"),
            libc("epoll_wait"),
            u("WaitEventSetWait"),
            u("WaitLatch"),
            u("ProcSleep"),
            u("WaitOnLock"),
            u("LockAcquireExtended"),
            u("XactLockTableWait"),
            u("heapam_tuple_lock"),
            u("PostgresMain"),
        ];
        assert_eq!(IdleRules::defaults().classify(&row_lock, false), None);
    }
}
