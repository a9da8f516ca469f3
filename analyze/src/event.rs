//! One event of a trace ([`Event`], of whichever family, as the reader decodes it), and
//! the one view of it every report takes ([`EventView`]): its kind, thread, stack, start
//! and (for an interval) duration, the waker where the kind has one, and the kind's own
//! fields. The top stacks, the HTML page, the Perfetto and Firefox exports and the agent's
//! profiles all read events through [`Event::view`], so that what an event's stack,
//! interval and waker are is said once, here.
use crate::reports::EventKind;
use ebtrace_format::events::{
    AggregateRow, AllocEvent, BioEvent, CpuSample, FreeEvent, FuncEvent, HistogramRow, LockEvent,
    MemGrowthEvent, OffCpuEvent, RunqEvent, SyscallEvent, TcpEvent, UsdtEvent,
};
use ebtrace_format::proto::{EventFamily, LockSource, MemGrowthKind, TcpEventKind};

/// One event, of whichever family.
#[derive(Debug)]
pub enum Event<'a> {
    Alloc(&'a AllocEvent),
    Free(&'a FreeEvent),
    Lock(&'a LockEvent),
    Func(&'a FuncEvent),
    Cpu(&'a CpuSample),
    OffCpu(&'a OffCpuEvent),
    MemGrowth(&'a MemGrowthEvent),
    Syscall(&'a SyscallEvent),
    Bio(&'a BioEvent),
    Runq(&'a RunqEvent),
    Tcp(&'a TcpEvent),
    Usdt(&'a UsdtEvent),
    /// A row of a kernel latency histogram (--syscalls, --bio, --runq) over an interval.
    Histogram(EventFamily, &'a HistogramRow),
    /// What the kernel counted under one stack in an interval (--aggregate), of a family.
    Aggregated(EventFamily, &'a AggregateRow),
}

/// An event as the reports see it ([`Event::view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventView {
    pub kind: EventKind,
    /// The process generation (`Loaded::pid` gives its pid).
    pub generation: u32,
    pub tid: u32,
    /// The event's stack id (0: none).
    pub stack: u64,
    /// Boottime ns: when the interval started, or the instant.
    pub time_ns: u64,
    /// How long the interval lasted (lock: the wait for the lock); None for the instants
    /// (alloc, cpu, memgrowth, tcp).
    pub duration_ns: Option<u64>,
    /// offcpu: the thread that woke the block; lock: the thread that released the lock.
    /// None for the kinds without one; its tid and stack are 0 when the recorder had
    /// none.
    pub waker: Option<Waker>,
    /// What the kind has besides.
    pub fields: Fields,
}

/// The thread that ended an off-CPU block or a lock wait, and its stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waker {
    pub tid: u32,
    pub stack: u64,
}

/// The fields of one kind beyond [`EventView`]'s (a `--func` call's arguments are left
/// out: no report shows the target's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    Alloc {
        size: u64,
        /// The block's address.
        address: u64,
        /// Bytes per sample when sampled by bytes (0: not sampled).
        sample_period: u64,
    },
    Lock {
        mutex: u64,
        /// How long the lock was held after the wait (uprobe mode; 0 when not recorded).
        hold_ns: u64,
        futex_op: u32,
        source: LockSource,
        /// 0 or -errno.
        result: i32,
    },
    Func {
        /// The `ProbedFunction` id.
        function: u64,
    },
    /// A USDT hit (its arguments are left out, as a call's).
    Usdt {
        /// The `ProbedUsdt` id.
        probe: u64,
    },
    Cpu {
        cpu: u32,
    },
    OffCpu {
        /// The task state it blocked in.
        state: u32,
        /// The off-CPU time it stands for in totals (its duration unless `--offcpu-sample`
        /// kept it with probability p: duration / p).
        weight: u64,
        /// The blocks it stands for (1, or 1/p).
        blocks: u64,
        /// From its wake to its switch-in, part of its duration (0: not known).
        runnable_ns: u64,
    },
    MemGrowth {
        kind: MemGrowthKind,
        size: u64,
        address: u64,
        /// The bytes it stands for in totals (its size unless `--memgrowth-sample` kept a
        /// page fault with probability p: size / p).
        weight: u64,
        /// The events it stands for (1, or 1/p).
        count: u64,
    },
    Syscall {
        nr: u32,
        ret: i64,
        /// The time it stands for in totals (its duration unless `--syscalls-sample` kept
        /// it with probability p: duration / p).
        weight: u64,
        /// The calls it stands for (1, or 1/p).
        calls: u64,
    },
    Bio {
        dev: u32,
        sector: u64,
        bytes: u64,
        op: u32,
        flags: u32,
        error: i32,
    },
    Runq {
        preempted: u32,
        cpu: u32,
        /// What the wait stands for in totals (--runq-sample), and how many waits.
        weight: u64,
        waits: u64,
    },
    Tcp {
        conn: u64,
        kind: TcpEventKind,
        state: u32,
        old_state: u32,
        local_port: u32,
        remote_port: u32,
        bytes_sent: u64,
        bytes_received: u64,
        retransmits: u32,
    },
}

/// The sub-key of a block I/O under its stack (and of its histogram rows): device and op.
pub fn bio_key(dev: u32, op: u32) -> u64 {
    (u64::from(dev) << 8) | u64::from(op & 0xff)
}

impl Event<'_> {
    /// The event as the reports see it; None for what is not one event of a kind: a free,
    /// a kernel histogram's row, an --aggregate row.
    pub fn view(&self) -> Option<EventView> {
        let fields = self.fields()?;
        /// The view of event `e` of `kind`: what every event has, and `fields`.
        macro_rules! view {
            ($kind:expr, $e:expr, $duration_ns:expr, $waker:expr) => {
                EventView {
                    kind: $kind,
                    generation: $e.generation,
                    tid: $e.tid,
                    stack: $e.stack,
                    time_ns: $e.time_ns,
                    duration_ns: $duration_ns,
                    waker: $waker,
                    fields,
                }
            };
        }
        let waker = |tid, stack| Some(Waker { tid, stack });
        use EventKind as K;
        Some(match self {
            Event::Alloc(e) => view!(K::Alloc, e, None, None),
            Event::Lock(e) => view!(
                K::Lock,
                e,
                Some(e.wait_ns),
                waker(e.waker_tid, e.waker_stack)
            ),
            Event::Func(e) => view!(K::Func, e, Some(e.duration_ns), None),
            Event::Cpu(e) => view!(K::Cpu, e, None, None),
            Event::OffCpu(e) => view!(
                K::OffCpu,
                e,
                Some(e.duration_ns),
                waker(e.waker_tid, e.waker_stack)
            ),
            Event::MemGrowth(e) => view!(K::MemGrowth, e, None, None),
            Event::Syscall(e) => view!(K::Syscall, e, Some(e.duration_ns), None),
            Event::Bio(e) => view!(K::Bio, e, Some(e.duration_ns), None),
            Event::Runq(e) => view!(K::Runq, e, Some(e.duration_ns), None),
            Event::Tcp(e) => view!(K::Tcp, e, None, None),
            Event::Usdt(e) => view!(K::Usdt, e, None, None),
            Event::Free(_) | Event::Histogram(..) | Event::Aggregated(..) => return None,
        })
    }

    /// The kind of the event, as its [`Event::view`] says, without making the view (a sink
    /// of one kind skips the others' events by it): None for a free, a histogram's row, an
    /// --aggregate row.
    pub fn kind(&self) -> Option<EventKind> {
        use EventKind as K;
        Some(match self {
            Event::Alloc(_) => K::Alloc,
            Event::Lock(_) => K::Lock,
            Event::Func(_) => K::Func,
            Event::Cpu(_) => K::Cpu,
            Event::OffCpu(_) => K::OffCpu,
            Event::MemGrowth(_) => K::MemGrowth,
            Event::Syscall(_) => K::Syscall,
            Event::Bio(_) => K::Bio,
            Event::Runq(_) => K::Runq,
            Event::Tcp(_) => K::Tcp,
            Event::Usdt(_) => K::Usdt,
            Event::Free(_) | Event::Histogram(..) | Event::Aggregated(..) => return None,
        })
    }

    /// The kind's own values of the event (see [`Event::view`]).
    fn fields(&self) -> Option<Fields> {
        Some(match self {
            Event::Alloc(e) => Fields::Alloc {
                size: e.size,
                address: e.address,
                sample_period: e.sample_period,
            },
            Event::Lock(e) => Fields::Lock {
                mutex: e.mutex,
                hold_ns: e.hold_ns,
                futex_op: e.futex_op,
                source: e.source,
                result: e.result,
            },
            Event::Func(e) => Fields::Func {
                function: e.function,
            },
            Event::Cpu(e) => Fields::Cpu { cpu: e.cpu },
            Event::Usdt(e) => Fields::Usdt { probe: e.probe },
            Event::OffCpu(e) => Fields::OffCpu {
                runnable_ns: e.runnable_ns,
                state: e.state,
                weight: e.weight(),
                blocks: e.blocks(),
            },
            Event::MemGrowth(e) => Fields::MemGrowth {
                kind: e.kind,
                size: e.size,
                address: e.address,
                weight: e.bytes(),
                count: e.count(),
            },
            Event::Syscall(e) => Fields::Syscall {
                nr: e.nr,
                ret: e.ret,
                weight: e.weight(),
                calls: e.calls(),
            },
            Event::Bio(e) => Fields::Bio {
                dev: e.dev,
                sector: e.sector,
                bytes: e.bytes,
                op: e.op,
                flags: e.flags,
                error: e.error,
            },
            Event::Runq(e) => Fields::Runq {
                preempted: e.preempted,
                cpu: e.cpu,
                weight: e.weight(),
                waits: e.waits(),
            },
            Event::Tcp(e) => Fields::Tcp {
                conn: e.conn,
                kind: e.kind,
                state: e.state,
                old_state: e.old_state,
                local_port: e.local_port,
                remote_port: e.remote_port,
                bytes_sent: e.bytes_sent,
                bytes_received: e.bytes_received,
                retransmits: e.retransmits,
            },
            Event::Free(_) | Event::Histogram(..) | Event::Aggregated(..) => return None,
        })
    }

    /// When, in which process generation and on which thread the event happened (a
    /// histogram's or an --aggregate row's: the end of its interval, thread 0).
    pub fn time_generation_tid(&self) -> (u64, u32, u32) {
        match self {
            Event::Free(e) => (e.time_ns, e.generation, e.tid),
            Event::Histogram(_, r) => (r.time_ns, r.generation, 0),
            // No thread: counted per process.
            Event::Aggregated(_, r) => (r.time_ns, r.generation, 0),
            ev => ev
                .view()
                .map_or((0, 0, 0), |v| (v.time_ns, v.generation, v.tid)),
        }
    }
}

impl EventView {
    /// The end of an interval (None for an instant).
    pub fn end_ns(&self) -> Option<u64> {
        self.duration_ns.map(|d| self.time_ns + d)
    }

    /// What a stack's events split by under it (a row of `top` each): lock the mutex, func
    /// the probed function, syscall the number, bio the device and op ([`bio_key`]), tcp
    /// the event kind (connect, accept); 0 for the others.
    pub fn sub_key(&self) -> u64 {
        match self.fields {
            Fields::Lock { mutex, .. } => mutex,
            Fields::Func { function } => function,
            Fields::Usdt { probe } => probe,
            Fields::Syscall { nr, .. } => u64::from(nr),
            Fields::Bio { dev, op, .. } => bio_key(dev, op),
            Fields::Tcp { kind, .. } => kind as u64,
            _ => 0,
        }
    }

    /// The two values a stack sums of its events, as `Measure::pick` reads them: first
    /// the bytes (alloc: as recorded, not scaled by its sampling; memgrowth: what a sampled
    /// fault stands for), the duration
    /// (lock: the wait) or 1 (cpu, tcp); second the lock's hold and the request's bytes
    /// of a bio, else 0.
    pub fn values(&self) -> (u64, u64) {
        let d = self.duration_ns.unwrap_or(0);
        match self.fields {
            Fields::Alloc { size, .. } => (size, 0),
            Fields::MemGrowth { weight, .. } => (weight, 0),
            Fields::Lock { hold_ns, .. } => (d, hold_ns),
            Fields::Bio { bytes, .. } => (d, bytes),
            Fields::Cpu { .. } | Fields::Tcp { .. } | Fields::Usdt { .. } => (1, 0),
            Fields::OffCpu { weight, .. } => (weight, 0),
            Fields::Syscall { weight, .. } => (weight, 0),
            Fields::Func { .. } => (d, 0),
            Fields::Runq { weight, .. } => (weight, 0),
        }
    }

    /// Whether the event gives memory back (an munmap, a shrinking brk): memgrowth's
    /// reports count growth only.
    pub fn is_release(&self) -> bool {
        matches!(
            self.fields,
            Fields::MemGrowth {
                kind: MemGrowthKind::Munmap,
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_of_every_kind() {
        let lock = LockEvent {
            time_ns: 10,
            generation: 2,
            tid: 3,
            stack: 4,
            mutex: 0x1000,
            wait_ns: 50,
            hold_ns: 7,
            waker_tid: 9,
            waker_stack: 11,
            futex_op: 0,
            source: LockSource::Futex,
            result: 0,
        };
        let v = Event::Lock(&lock).view().unwrap();
        assert_eq!(v.kind, EventKind::Lock);
        assert_eq!((v.time_ns, v.generation, v.tid, v.stack), (10, 2, 3, 4));
        assert_eq!((v.duration_ns, v.end_ns()), (Some(50), Some(60)));
        assert_eq!(v.waker, Some(Waker { tid: 9, stack: 11 }));
        assert_eq!((v.sub_key(), v.values()), (0x1000, (50, 7)));
        assert_eq!(Event::Lock(&lock).time_generation_tid(), (10, 2, 3));
        let cpu = CpuSample {
            time_ns: 5,
            generation: 1,
            tid: 1,
            stack: 2,
            cpu: 3,
        };
        let v = Event::Cpu(&cpu).view().unwrap();
        assert_eq!((v.duration_ns, v.waker, v.values()), (None, None, (1, 0)));
        let bio = BioEvent {
            dev: 8 << 20,
            op: 1,
            bytes: 4096,
            duration_ns: 100,
            ..Default::default()
        };
        let v = Event::Bio(&bio).view().unwrap();
        assert_eq!(
            (v.sub_key(), v.values()),
            (bio_key(8 << 20, 1), (100, 4096))
        );
        let unmap = MemGrowthEvent {
            kind: MemGrowthKind::Munmap,
            size: 4096,
            ..Default::default()
        };
        assert!(Event::MemGrowth(&unmap).view().unwrap().is_release());
        let free = FreeEvent {
            time_ns: 1,
            generation: 2,
            tid: 3,
            address: 4,
            allocator: 0,
        };
        assert_eq!(Event::Free(&free).view(), None);
        assert_eq!(Event::Free(&free).time_generation_tid(), (1, 2, 3));
        // Every kind has a view of its own kind.
        let events = [
            Event::Alloc(&AllocEvent::default()),
            Event::Lock(&LockEvent::default()),
            Event::Func(&FuncEvent::default()),
            Event::Cpu(&CpuSample::default()),
            Event::OffCpu(&OffCpuEvent::default()),
            Event::MemGrowth(&MemGrowthEvent::default()),
            Event::Syscall(&SyscallEvent::default()),
            Event::Bio(&BioEvent::default()),
            Event::Runq(&RunqEvent::default()),
            Event::Tcp(&TcpEvent::default()),
            Event::Usdt(&UsdtEvent::default()),
        ];
        for (e, k) in events.iter().zip(EventKind::ALL) {
            let v = e.view();
            assert_eq!(v.map(|v| v.kind), Some(k));
            // The kind without the view is the view's.
            assert_eq!(e.kind(), Some(k));
            assert_eq!(v.unwrap().duration_ns.is_some(), k.has_latency(), "{k:?}");
        }
        assert_eq!(Event::Free(&free).kind(), None);
    }
}
