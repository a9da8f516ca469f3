//! Idle waits and lock contention on synthetic traces with known answers: every default
//! idle shape (epoll, poll, accept, a read at the top of a connection loop, a pool's
//! get-task wait, a timer thread) and the waits that look alike but are work (a read
//! inside a request, a sleep in a retry, a mutex wait); `--idle` patterns and
//! `--no-idle-rules`; contention first in `locks` and the lock finding, a condvar wait
//! counted as contention only when its thread then waited for the condvar's mutex.
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::idle::IdleRules;
use ebtrace_analyze::reports::summary::summary_with;
use ebtrace_analyze::reports::{top_with, EventKind, Measure, Row, TopOptions};
use ebtrace_format::events::{LockEvent, OffCpuEvent};
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use std::collections::BTreeMap;

const SRV: u64 = 0x5555_0000_0000;
const LIBC: u64 = 0x7f00_0000_0000;
const KERNEL: u64 = 0xffff_ffff_8100_0000;
const MS: u64 = 1_000_000;

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

/// A frame of a synthetic stack: a kernel function, or a function of the server or libc.
#[derive(Clone, Copy)]
enum F {
    K(&'static str),
    S(&'static str),
    C(&'static str),
}
use F::{C, K, S};

/// Writes a trace of process 42 (`/usr/bin/srv` and libc mapped) whose stacks are made of
/// `F`s: every function gets an address of its own, named by `KernelSymbols` (kernel) or
/// by the symbolizer's records (user), so the reports see exactly these frames.
struct Builder {
    w: TraceWriter<Vec<u8>>,
    srv_id: u64,
    libc_id: u64,
    /// name → (address, is libc)
    user: BTreeMap<&'static str, (u64, bool)>,
    kernel: BTreeMap<&'static str, u64>,
}

/// A futex wait of `tid` under `frames`, from `start` for `wait` ns: on `mutex` with
/// futex op `op` (0: a mutex's FUTEX_WAIT, 9: a condvar's FUTEX_WAIT_BITSET).
struct Wait<'a> {
    start: u64,
    tid: u32,
    frames: &'a [F],
    mutex: u64,
    op: u32,
    wait: u64,
}

impl Builder {
    fn new() -> Builder {
        let header = pb::Header {
            recorder_version: "idle-test".into(),
            hostname: "host".into(),
            arch: "x86_64".into(),
            start_time_ns: 1_000_000_000,
            ..Default::default()
        };
        let opts = WriterOptions {
            chunk_interval: None,
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), header, opts).unwrap();
        let comm = w.intern_string(b"srv").unwrap();
        w.write_record(&rec(Kind::Process(pb::Process {
            generation: 1,
            pid: 42,
            comm,
            event: pb::ProcessEvent::Existing as i32,
            time_ns: 1_000_000_000,
            ..Default::default()
        })))
        .unwrap();
        let srv_path = w.intern_string(b"/usr/bin/srv").unwrap();
        let srv_id = w.intern_build_id(&[0xab; 20]).unwrap();
        let libc_path = w
            .intern_string(b"/usr/lib/x86_64-linux-gnu/libc.so.6")
            .unwrap();
        let libc_id = w.intern_build_id(&[0xcd; 20]).unwrap();
        for (start, path, build_id) in [(SRV, srv_path, srv_id), (LIBC, libc_path, libc_id)] {
            w.write_record(&rec(Kind::Mapping(pb::Mapping {
                generation: 1,
                start,
                end: start + 0x100000,
                file_offset: 0x1000,
                path,
                build_id,
                perms: 5,
                source: pb::MappingSource::Snapshot as i32,
                ..Default::default()
            })))
            .unwrap();
        }
        Builder {
            w,
            srv_id,
            libc_id,
            user: BTreeMap::new(),
            kernel: BTreeMap::new(),
        }
    }

    /// The stack id of `frames` (leaf first: kernel frames, then user frames).
    fn stack(&mut self, frames: &[F]) -> u64 {
        let mut kips = Vec::new();
        let mut uips = Vec::new();
        for f in frames {
            match *f {
                K(name) => {
                    let n = self.kernel.len() as u64;
                    let a = *self.kernel.entry(name).or_insert(KERNEL + n * 0x100);
                    kips.push(a + 0x10);
                }
                S(name) | C(name) => {
                    let libc = matches!(f, C(_));
                    let n = self.user.len() as u64;
                    let base = if libc { LIBC } else { SRV };
                    let (a, _) = *self
                        .user
                        .entry(name)
                        .or_insert((base + (n + 1) * 0x100, libc));
                    uips.push(a + 0x10);
                }
            }
        }
        self.w.intern_stack(1, &uips, &kips, 0).unwrap()
    }

    fn offcpu(&mut self, t: &mut u64, tid: u32, frames: &[F], duration_ns: u64) {
        let stack = self.stack(frames);
        *t += duration_ns + 1000;
        self.w
            .offcpu(&OffCpuEvent {
                time_ns: *t - duration_ns,
                generation: 1,
                tid,
                stack,
                duration_ns,
                waker_tid: 0,
                waker_stack: 0,
                state: 1,
                weight_ns: 0,
                runnable_ns: 0,
            })
            .unwrap();
    }

    /// A futex wait; returns its end.
    fn lock(&mut self, w: Wait) -> u64 {
        let Wait {
            start,
            tid,
            frames,
            mutex,
            op,
            wait,
        } = w;
        let stack = self.stack(frames);
        self.w
            .lock(&LockEvent {
                time_ns: start,
                generation: 1,
                tid,
                stack,
                mutex,
                wait_ns: wait,
                hold_ns: 0,
                waker_tid: 0,
                waker_stack: 0,
                futex_op: op,
                source: pb::LockSource::Futex,
                result: 0,
            })
            .unwrap();
        start + wait
    }

    fn finish(mut self) -> Vec<u8> {
        let mut k = pb::KernelSymbols::default();
        for (name, a) in &self.kernel {
            k.address.push(*a);
            k.name.push(self.w.intern_string(name.as_bytes()).unwrap());
            k.module.push(0);
        }
        self.w.write_record(&rec(Kind::KernelSymbols(k))).unwrap();
        self.w
            .write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
                symbolizer_version: "idle-test".into(),
                ..Default::default()
            })))
            .unwrap();
        for (name, (a, libc)) in self.user.clone() {
            let (base, id) = if libc {
                (LIBC, self.libc_id)
            } else {
                (SRV, self.srv_id)
            };
            // The leaf is looked up at its ip, a caller at its return address - 1.
            for ip in [a + 0x10, a + 0x10 - 1] {
                let frames = vec![pb::SymbolFrame {
                    function: self.w.intern_string(name.as_bytes()).unwrap(),
                    file: self
                        .w
                        .intern_string(if libc { b"libc.c" } else { b"srv.cpp" })
                        .unwrap(),
                    line: 1,
                    ..Default::default()
                }];
                self.w
                    .write_record(&rec(Kind::SymbolizedAddress(pb::SymbolizedAddress {
                        build_id: id,
                        address: ip - base + 0x1000,
                        frames,
                        reason: 0,
                    })))
                    .unwrap();
            }
        }
        self.w.finish(Some(pb::Trailer::default())).unwrap()
    }
}

const CV_WAIT: &str = "std::condition_variable::wait(std::unique_lock<std::mutex>&)";

/// The off-CPU stacks: (distinctive function, expected idle reason, ms off CPU).
const OFFCPU: &[(&str, Option<&str>, u64)] = &[
    ("EventLoop::run()", Some("epoll wait"), 900),
    ("Conn::wait_readable()", Some("poll wait"), 800),
    ("Listener::run()", Some("accept wait"), 700),
    ("Conn::read_request()", Some("idle connection read"), 600),
    ("Backend::fetch()", None, 50),
    (
        "pool::ThreadPool::get_task()",
        Some("thread pool waiting for a task"),
        500,
    ),
    (
        "TimerThread::run()",
        Some("timer thread waiting for its next timer"),
        400,
    ),
    ("Ledger::post(long)", None, 100),
    ("Retry::backoff()", None, 30),
];

fn offcpu_trace() -> Vec<u8> {
    let mut b = Builder::new();
    let mut t = 1_100_000_000;
    let sched = K("schedule");
    let stacks: Vec<Vec<F>> = vec![
        vec![
            sched,
            K("ep_poll"),
            K("do_epoll_wait"),
            C("epoll_wait"),
            S("EventLoop::run()"),
            S("main"),
        ],
        vec![
            sched,
            K("do_sys_poll"),
            C("poll"),
            S("Conn::wait_readable()"),
            S("serve_client(int)"),
        ],
        vec![
            sched,
            K("inet_csk_accept"),
            K("inet_accept"),
            C("accept"),
            S("Listener::run()"),
        ],
        // The read the connection loop starts each request with: idle.
        vec![
            sched,
            K("sk_wait_data"),
            K("tcp_recvmsg"),
            C("recv"),
            S("Conn::read_request()"),
            S("serve_client(int)"),
        ],
        // A read inside a request (waiting for a backend): work.
        vec![
            sched,
            K("sk_wait_data"),
            K("tcp_recvmsg"),
            C("recv"),
            S("Backend::fetch()"),
            S("handle_request(Request&)"),
            S("serve_client(int)"),
        ],
        vec![
            sched,
            K("futex_wait"),
            C("pthread_cond_wait"),
            S(CV_WAIT),
            S("pool::ThreadPool::get_task()"),
            S("pool::ThreadPool::worker_loop()"),
        ],
        vec![
            sched,
            K("do_nanosleep"),
            K("hrtimer_nanosleep"),
            C("clock_nanosleep"),
            S("TimerThread::run()"),
        ],
        // A contended mutex in a request: work.
        vec![
            sched,
            K("futex_wait"),
            C("__lll_lock_wait"),
            C("pthread_mutex_lock"),
            S("Ledger::post(long)"),
            S("handle_request(Request&)"),
        ],
        // A sleep outside any timer: work (unless --idle says otherwise).
        vec![
            sched,
            K("do_nanosleep"),
            K("hrtimer_nanosleep"),
            C("clock_nanosleep"),
            S("Retry::backoff()"),
            S("handle_request(Request&)"),
        ],
    ];
    for (i, (frames, (_, _, ms))) in stacks.iter().zip(OFFCPU).enumerate() {
        b.offcpu(&mut t, 100 + i as u32, frames, ms * MS);
    }
    b.finish()
}

fn reader(bytes: &[u8]) -> TraceReader<&[u8]> {
    TraceReader::new(bytes).unwrap()
}

/// Each row's idle reason, by the distinctive function of its stack (one of `names`).
fn reasons(rows: &[Row], names: &[&str]) -> Vec<(String, Option<String>)> {
    rows.iter()
        .map(|r| {
            let f = r
                .frames()
                .iter()
                .map(|f| f.function.as_str())
                .find(|f| names.contains(f))
                .unwrap_or("?")
                .to_string();
            (f, r.idle_reason().map(str::to_string))
        })
        .collect()
}

#[test]
fn every_default_shape_and_its_look_alikes_in_top_offcpu() {
    let bytes = offcpu_trace();
    let names: Vec<&str> = OFFCPU.iter().map(|x| x.0).collect();
    let rep = top_with(
        reader(&bytes),
        &TopOptions {
            kind: EventKind::OffCpu,
            by: Measure::Time,
            filter: &Filter::default(),
            n: 100,
            idle: &IdleRules::defaults(),
        },
    );
    let got = reasons(&rep.rows, &names);
    // The work first, largest first; then the idle waits, largest first.
    let want: Vec<(String, Option<String>)> = [
        ("Ledger::post(long)", None),
        ("Backend::fetch()", None),
        ("Retry::backoff()", None),
        ("EventLoop::run()", Some("epoll wait")),
        ("Conn::wait_readable()", Some("poll wait")),
        ("Listener::run()", Some("accept wait")),
        ("Conn::read_request()", Some("idle connection read")),
        (
            "pool::ThreadPool::get_task()",
            Some("thread pool waiting for a task"),
        ),
        (
            "TimerThread::run()",
            Some("timer thread waiting for its next timer"),
        ),
    ]
    .iter()
    .map(|(f, r)| (f.to_string(), r.map(str::to_string)))
    .collect();
    assert_eq!(got, want);
    let idle_ms: u64 = OFFCPU.iter().filter(|x| x.1.is_some()).map(|x| x.2).sum();
    assert_eq!(rep.totals["idle_ns"], idle_ms * MS);
    // JSON: idle and idle_reason on every row.
    let json = serde_json::to_value(&rep.rows).unwrap();
    assert_eq!(json[0]["idle"], false);
    assert_eq!(json[0]["idle_reason"], serde_json::Value::Null);
    assert_eq!(json[3]["idle"], true);
    assert_eq!(json[3]["idle_reason"], "epoll wait");
    // The text marks them.
    let text = rep.to_text();
    assert!(text.contains("\n#4 [idle: epoll wait]  count 1"), "{text}");
    assert!(text.contains("\n#1 count 1"), "{text}");

    // The summary names the busiest wait that is work, and the idle part by reason.
    let s = summary_with(
        || Some(reader(&bytes)),
        &Filter::default(),
        &IdleRules::defaults(),
    );
    let f = s.findings.iter().find(|f| f.family == "offcpu").unwrap();
    assert_eq!(f.subject, "futex_wait in Ledger::post");
    let total: u64 = OFFCPU.iter().map(|x| x.2).sum();
    assert_eq!(f.total, total * MS);
    assert_eq!(f.value, 100 * MS);
    assert!((f.idle_share.unwrap() - idle_ms as f64 / total as f64).abs() < 1e-9);
    assert!((f.idle["epoll wait"] - 900.0 / total as f64).abs() < 1e-9);
    assert_eq!(f.idle.len(), 6, "{:?}", f.idle);
    assert!(
        f.finding.starts_with("most off-CPU time: futex_wait in Ledger::post, 2% of 4.08 s (idle waits, 96%, shown apart: epoll wait 22%, poll wait 20%,"),
        "{}",
        f.finding
    );
}

#[test]
fn idle_patterns_add_a_shape_and_no_idle_rules_turns_the_defaults_off() {
    let bytes = offcpu_trace();
    let names: Vec<&str> = OFFCPU.iter().map(|x| x.0).collect();
    let top = |rules: &IdleRules| {
        let rep = top_with(
            reader(&bytes),
            &TopOptions {
                kind: EventKind::OffCpu,
                by: Measure::Time,
                filter: &Filter::default(),
                n: 100,
                idle: rules,
            },
        );
        reasons(&rep.rows, &names)
    };
    let mut rules = IdleRules::defaults();
    rules.add_pattern("Retry::backoff").unwrap();
    let got = top(&rules);
    assert_eq!(got[0], ("Ledger::post(long)".to_string(), None));
    let retry = got.iter().find(|r| r.0 == "Retry::backoff()").unwrap();
    // Matched without the parameters; the user's pattern named as the reason.
    assert_eq!(retry.1.as_deref(), Some("--idle Retry::backoff"));
    assert_eq!(got.iter().filter(|r| r.1.is_some()).count(), 7);
    // A user's pattern comes before the defaults.
    let mut rules = IdleRules::defaults();
    rules.add_pattern("*EventLoop*").unwrap();
    let got = top(&rules);
    let ev = got.iter().find(|r| r.0 == "EventLoop::run()").unwrap();
    assert_eq!(ev.1.as_deref(), Some("--idle *EventLoop*"));
    // --no-idle-rules: nothing is idle, in the order of the time alone.
    let got = top(&IdleRules::none());
    assert!(got.iter().all(|r| r.1.is_none()), "{got:?}");
    assert_eq!(got[0].0, "EventLoop::run()");
    // --no-idle-rules with an --idle: only that one.
    let mut rules = IdleRules::none();
    rules.add_pattern("TimerThread::*").unwrap();
    let got = top(&rules);
    let idle: Vec<_> = got.iter().filter(|r| r.1.is_some()).collect();
    assert_eq!(idle.len(), 1);
    assert_eq!(got.last().unwrap().0, "TimerThread::run()");
    let s = summary_with(
        || Some(reader(&bytes)),
        &Filter::default(),
        &IdleRules::none(),
    );
    let f = s.findings.iter().find(|f| f.family == "offcpu").unwrap();
    assert_eq!(f.subject, "ep_poll in EventLoop::run");
    assert_eq!(f.idle_share, None);
}

const LEDGER_MU: u64 = 0x7000_1000;
const POOL_MU: u64 = 0x7000_2000;
const POOL_CV: u64 = 0x7000_3000;
const COMMIT_CV: u64 = 0x7000_4000;

/// Lock waits: a pool's worker waits for a task on its condvar and, woken, waits for the
/// pool's mutex (a contended reacquire, inside pthread_cond_wait); another worker waits
/// for a task and then for the ledger's mutex in the task (not a reacquire); a request
/// waits for the ledger's mutex; a committer waits on a condvar outside any pool (work,
/// not contention), longer than all the mutex waits.
fn lock_trace() -> Vec<u8> {
    let mut b = Builder::new();
    let get_task = [
        C("pthread_cond_wait"),
        S(CV_WAIT),
        S("pool::ThreadPool::get_task()"),
        S("pool::ThreadPool::worker_loop()"),
    ];
    let reacquire = [
        C("__lll_lock_wait"),
        C("__pthread_mutex_cond_lock"),
        C("pthread_cond_wait"),
        S(CV_WAIT),
        S("pool::ThreadPool::get_task()"),
        S("pool::ThreadPool::worker_loop()"),
    ];
    let ledger = |caller| {
        [
            C("__lll_lock_wait"),
            C("pthread_mutex_lock"),
            S("Ledger::post(long)"),
            S(caller),
        ]
    };
    let commit = [
        C("pthread_cond_wait"),
        S(CV_WAIT),
        S("Ledger::wait_for_commit()"),
        S("handle_request(Request&)"),
    ];
    let mut t = 1_100_000_000;
    for _ in 0..3 {
        // Worker 50: the task's condvar, then its mutex reacquired 10 µs later.
        let end = b.lock(Wait {
            start: t,
            tid: 50,
            frames: &get_task,
            mutex: POOL_CV,
            op: 9,
            wait: 200 * MS,
        });
        b.lock(Wait {
            start: end + 10_000,
            tid: 50,
            frames: &reacquire,
            mutex: POOL_MU,
            op: 0,
            wait: 2 * MS,
        });
        // Worker 51: the task's condvar, then the ledger's mutex in the task.
        let end = b.lock(Wait {
            start: t,
            tid: 51,
            frames: &get_task,
            mutex: POOL_CV,
            op: 9,
            wait: 150 * MS,
        });
        b.lock(Wait {
            start: end + 10_000,
            tid: 51,
            frames: &ledger("pool::ThreadPool::worker_loop()"),
            mutex: LEDGER_MU,
            op: 0,
            wait: 3 * MS,
        });
        // A request: the ledger's mutex; a committer's condvar.
        b.lock(Wait {
            start: t,
            tid: 52,
            frames: &ledger("handle_request(Request&)"),
            mutex: LEDGER_MU,
            op: 0,
            wait: 5 * MS,
        });
        b.lock(Wait {
            start: t,
            tid: 53,
            frames: &commit,
            mutex: COMMIT_CV,
            op: 9,
            wait: 50 * MS,
        });
        t += 300 * MS;
    }
    b.finish()
}

#[test]
fn contention_first_and_a_condvar_is_contention_only_when_its_mutex_was() {
    let bytes = lock_trace();
    let rep = top_with(
        reader(&bytes),
        &TopOptions {
            kind: EventKind::Lock,
            by: Measure::Wait,
            filter: &Filter::default(),
            n: 100,
            idle: &IdleRules::defaults(),
        },
    );
    let rows: Vec<serde_json::Value> = rep
        .rows
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let seen: Vec<(String, &str, bool, Option<&str>, u64)> = rows
        .iter()
        .map(|r| {
            let fs = r["frames"].as_array().unwrap();
            let user = fs
                .iter()
                .map(|f| f["function"].as_str().unwrap())
                .find(|f| {
                    !f.starts_with("__")
                        && *f != "pthread_cond_wait"
                        && *f != "pthread_mutex_lock"
                        && *f != CV_WAIT
                })
                .unwrap()
                .to_string();
            (
                format!(
                    "{user} {}",
                    fs.last().unwrap()["function"].as_str().unwrap()
                ),
                r["wait_kind"].as_str().unwrap(),
                r["contention"].as_bool().unwrap(),
                r["idle_reason"].as_str(),
                r["wait_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    let pool = Some("thread pool waiting for a task");
    assert_eq!(
        seen,
        [
            // Contention first, largest first: the ledger from a request and from a task,
            // the pool's mutex reacquired after its condvar's signal.
            (
                "Ledger::post(long) handle_request(Request&)".to_string(),
                "mutex",
                true,
                None,
                15 * MS
            ),
            (
                "Ledger::post(long) pool::ThreadPool::worker_loop()".to_string(),
                "mutex",
                true,
                None,
                9 * MS
            ),
            (
                "pool::ThreadPool::get_task() pool::ThreadPool::worker_loop()".to_string(),
                "condvar_mutex",
                true,
                None,
                6 * MS
            ),
            // Then the waits that are neither contention nor idle.
            (
                "Ledger::wait_for_commit() handle_request(Request&)".to_string(),
                "condvar",
                false,
                None,
                150 * MS
            ),
            // Then the idle: the pool's condvar (one row: the same stack and address for
            // both workers), contention because worker 50's reacquires were contended.
            (
                "pool::ThreadPool::get_task() pool::ThreadPool::worker_loop()".to_string(),
                "condvar",
                true,
                pool,
                1050 * MS
            ),
        ]
    );
    assert_eq!(rep.totals["contention_wait_ns"], 30 * MS);
    assert_eq!(rep.totals["idle_ns"], 1050 * MS);
    // Without worker 50's reacquires the pool's condvar is no contention.
    let mut b = Builder::new();
    let get_task = [
        C("pthread_cond_wait"),
        S(CV_WAIT),
        S("pool::ThreadPool::get_task()"),
    ];
    let end = b.lock(Wait {
        start: 1_100_000_000,
        tid: 51,
        frames: &get_task,
        mutex: POOL_CV,
        op: 9,
        wait: 150 * MS,
    });
    b.lock(Wait {
        start: end + 10_000,
        tid: 51,
        frames: &[
            C("__lll_lock_wait"),
            C("pthread_mutex_lock"),
            S("Ledger::post(long)"),
        ],
        mutex: LEDGER_MU,
        op: 0,
        wait: 3 * MS,
    });
    // A mutex wait long after a condvar wait is no reacquire either.
    let t = end + 500 * MS;
    let end = b.lock(Wait {
        start: t,
        tid: 50,
        frames: &get_task,
        mutex: POOL_CV,
        op: 9,
        wait: 150 * MS,
    });
    b.lock(Wait {
        start: end + 2 * MS,
        tid: 50,
        frames: &[
            C("__lll_lock_wait"),
            C("__pthread_mutex_cond_lock"),
            C("pthread_cond_wait"),
            S(CV_WAIT),
            S("pool::ThreadPool::get_task()"),
        ],
        mutex: POOL_MU,
        op: 0,
        wait: MS,
    });
    let bytes2 = b.finish();
    let rep = top_with(
        reader(&bytes2),
        &TopOptions {
            kind: EventKind::Lock,
            by: Measure::Wait,
            filter: &Filter::default(),
            n: 100,
            idle: &IdleRules::defaults(),
        },
    );
    let cv = rep
        .rows
        .iter()
        .find_map(|r| match r {
            Row::Lock(l) if l.wait_kind == "condvar" => Some(l),
            _ => None,
        })
        .unwrap();
    assert!(!cv.contention, "{cv:?}");
    assert!(cv.idle);

    // The lock finding: the busiest contended mutex, not the larger condvar waits.
    let s = summary_with(
        || Some(reader(&bytes)),
        &Filter::default(),
        &IdleRules::defaults(),
    );
    let f = s.findings.iter().find(|f| f.family == "lock").unwrap();
    assert_eq!(f.subject, format!("mutex {LEDGER_MU:#x} in Ledger::post"));
    assert_eq!(f.value, 24 * MS);
    assert!(
        f.finding
            .contains("(idle waits, 85%, shown apart: thread pool waiting for a task 85%)"),
        "{}",
        f.finding
    );
    // Even with every idle rule off, contention comes first.
    let s = summary_with(
        || Some(reader(&bytes)),
        &Filter::default(),
        &IdleRules::none(),
    );
    let f = s.findings.iter().find(|f| f.family == "lock").unwrap();
    assert_eq!(f.subject, format!("mutex {LEDGER_MU:#x} in Ledger::post"));
}
