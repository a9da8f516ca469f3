//! Plain event structs and their packed-column batches.
//!
//! Each event family has a flat `…Event` struct (what the recorder produces and the reports
//! consume) and a protobuf `…Batch` of packed columns (what is on disk). [`Family`] converts
//! between the two: times, and the one address column per family that is correlated from
//! event to event, are zigzag deltas; the rest are stored as they are and left to zstd.
use crate::error::{Error, ErrorKind};
use ebtrace_proto::v1::{
    record::Kind, AllocBatch, AllocKind, BioBatch, CpuSampleBatch, FreeBatch, FuncBatch, LockBatch,
    LockSource, MemGrowthBatch, MemGrowthKind, OffCpuBatch, Record, RunqBatch, SyscallBatch,
    TcpBatch, TcpEventKind, UsdtBatch,
};

/// Running values that delta columns are relative to: the previous event's time, and the
/// previous address *of the same thread* (allocators keep per-thread arenas, so addresses
/// of one thread are close to each other while those of two threads are gigabytes apart).
///
/// The previous addresses are kept per thread in a small table searched from the thread
/// last seen (most batches hold a few threads, and runs of one thread's events): a hash map
/// per event was a tenth of a heap report's time.
#[derive(Debug, Default, Clone)]
pub struct Deltas {
    time: u64,
    addr: u64,
    /// (tid, its previous address).
    by_tid: Vec<(u32, u64)>,
    /// The index in `by_tid` of the thread last loaded.
    last: usize,
    /// Past 64 threads: tid -> index in `by_tid`.
    index: std::collections::HashMap<u32, usize>,
}

impl Deltas {
    fn reset(&mut self, time: u64) {
        self.time = time;
        self.addr = 0;
        self.by_tid.clear();
        self.index.clear();
        self.last = 0;
    }
    /// The index of `tid` in `by_tid`, added with address 0 when new.
    #[inline(always)]
    fn slot(&mut self, tid: u32) -> usize {
        if self.by_tid.get(self.last).is_some_and(|e| e.0 == tid) {
            return self.last;
        }
        self.find(tid)
    }
    /// [`Deltas::slot`] of a thread other than the last one.
    #[cold]
    #[inline(never)]
    fn find(&mut self, tid: u32) -> usize {
        let i = if self.by_tid.len() <= 64 {
            self.by_tid.iter().position(|e| e.0 == tid)
        } else {
            self.index.get(&tid).copied()
        };
        let i = i.unwrap_or_else(|| {
            self.by_tid.push((tid, 0));
            let i = self.by_tid.len() - 1;
            if self.by_tid.len() == 65 {
                self.index = self
                    .by_tid
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.0, i))
                    .collect();
            } else if self.by_tid.len() > 65 {
                self.index.insert(tid, i);
            }
            i
        });
        self.last = i;
        i
    }
    #[inline]
    fn load(&mut self, tid: u32) {
        let i = self.slot(tid);
        self.addr = self.by_tid[i].1;
    }
    #[inline]
    fn store(&mut self, tid: u32) {
        let i = self.slot(tid);
        self.by_tid[i].1 = self.addr;
    }
}

/// A batch type of packed columns and the event type it holds.
pub trait Family: Default {
    type Event;
    /// Appends one event; `st` carries the previous event's time and address.
    fn push(&mut self, st: &mut Deltas, e: &Self::Event);
    /// Number of events in the batch.
    fn len(&self) -> usize;
    /// Whether the batch holds no event.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Decodes every event, checking that the columns agree in length.
    fn decode(&self) -> Result<Vec<Self::Event>, Error>;
    /// Wraps the batch in a record.
    fn into_record(self) -> Record;
}

fn column_mismatch(batch: &str, column: &str, got: usize, want: usize) -> Error {
    Error::new(
        ErrorKind::Corrupt,
        format!("{batch}: column {column} has {got} values for {want} events"),
    )
}

macro_rules! push_col {
    (plain, $col:expr, $v:expr, $st:ident, $i:expr) => {
        $col.push($v.into())
    };
    // A column that stays empty while every value is 0, then holds one value per event
    // (the zeros before its first non-zero value filled in).
    (optional, $col:expr, $v:expr, $st:ident, $i:expr) => {
        if $v != 0 || !$col.is_empty() {
            $col.resize($i, 0);
            $col.push($v.into());
        }
    };
    (enumeration, $col:expr, $v:expr, $st:ident, $i:expr) => {
        $col.push($v as i32)
    };
    (delta, $col:expr, $v:expr, $st:ident, $i:expr) => {{
        $col.push(($v).wrapping_sub($st.addr) as i64);
        $st.addr = $v;
    }};
}

/// A column as [`get_col`] reads it: of `n` values (an optional column: 0 or `n`).
macro_rules! slice_col {
    (optional, $col:expr, $n:expr) => {
        &$col[..]
    };
    ($enc:ident, $col:expr, $n:expr) => {
        &$col[..$n]
    };
}

macro_rules! get_col {
    (plain, $t:ty, $col:expr, $i:expr, $st:ident) => {
        $col[$i] as $t
    };
    (optional, $t:ty, $col:expr, $i:expr, $st:ident) => {
        $col.get($i).copied().unwrap_or(0) as $t
    };
    (enumeration, $t:ty, $col:expr, $i:expr, $st:ident) => {
        <$t>::try_from($col[$i]).unwrap_or_default()
    };
    (delta, $t:ty, $col:expr, $i:expr, $st:ident) => {{
        $st.addr = $st.addr.wrapping_add($col[$i] as u64);
        $st.addr
    }};
}

/// Whether a column's length fits `n` events (an optional column may also be empty).
macro_rules! col_fits {
    (optional, $col:expr, $n:expr) => {
        $col.is_empty() || $col.len() == $n
    };
    ($enc:ident, $col:expr, $n:expr) => {
        $col.len() == $n
    };
}

macro_rules! family {
    ($(#[$m:meta])* $Event:ident in $Batch:ident as $Kind:ident {
        $($(#[$fm:meta])* $f:ident : $t:ty = $enc:ident($col:ident)),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $Event {
            /// Boottime ns.
            pub time_ns: u64,
            $($(#[$fm])* pub $f: $t,)*
        }

        impl Family for $Batch {
            type Event = $Event;

            fn push(&mut self, st: &mut Deltas, e: &$Event) {
                if self.time_delta.is_empty() {
                    self.base_time_ns = e.time_ns;
                    st.reset(e.time_ns);
                }
                let _index = self.time_delta.len();
                self.time_delta.push(e.time_ns.wrapping_sub(st.time) as i64);
                st.time = e.time_ns;
                st.load(e.tid);
                $(push_col!($enc, self.$col, e.$f, st, _index);)*
                st.store(e.tid);
            }

            fn len(&self) -> usize {
                self.time_delta.len()
            }

            fn decode(&self) -> Result<Vec<$Event>, Error> {
                let n = self.time_delta.len();
                $(if !col_fits!($enc, self.$col, n) {
                    return Err(column_mismatch(stringify!($Batch), stringify!($col), self.$col.len(), n));
                })*
                let mut st = Deltas::default();
                st.reset(self.base_time_ns);
                // Columns sliced to their checked lengths, so that indexing them by i < n
                // needs no bounds check.
                let (time_delta, tids) = (&self.time_delta[..n], &self.tid[..n]);
                $(let $col = slice_col!($enc, self.$col, n);)*
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    st.time = st.time.wrapping_add(time_delta[i] as u64);
                    let k = st.slot(tids[i]);
                    st.addr = st.by_tid[k].1;
                    out.push($Event { time_ns: st.time, $($f: get_col!($enc, $t, $col, i, st),)* });
                    st.by_tid[k].1 = st.addr;
                }
                Ok(out)
            }

            fn into_record(self) -> Record {
                Record { kind: Some(Kind::$Kind(self)) }
            }
        }
    };
}

family! {
    /// A traced allocation.
    AllocEvent in AllocBatch as Allocs {
        /// Process generation.
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        /// Stack id.
        stack: u64 = plain(stack),
        size: u64 = plain(size),
        /// Returned block address.
        address: u64 = delta(address_delta),
        kind: AllocKind = enumeration(kind),
        /// Bytes per sample when sampled by bytes (0: not sampled; see the proto).
        sample_period: u64 = optional(sample_period),
        /// 0: the system allocator; N: the Nth `--alloc-fn` (the header's `alloc-fn`).
        allocator: u32 = optional(allocator),
    }
}

family! {
    /// The free of a traced block.
    FreeEvent in FreeBatch as Frees {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        address: u64 = delta(address_delta),
        /// The allocator whose block it was (`AllocEvent::allocator`).
        allocator: u32 = optional(allocator),
    }
}

/// The key of a block among a process's live blocks: its address, with the allocator's
/// number (`--alloc-fn`; 0 for malloc's family) in the top byte. A custom allocator's blocks
/// are a space of their own (an arena's first block is often at the address of the chunk
/// malloc gave it), and user-space addresses are below 2^56.
#[inline]
pub fn block_key(address: u64, allocator: u32) -> u64 {
    address ^ (u64::from(allocator) << 56)
}

impl AllocEvent {
    /// [`block_key`] of the allocated block.
    #[inline]
    pub fn block(&self) -> u64 {
        block_key(self.address, self.allocator)
    }
}

impl FreeEvent {
    /// [`block_key`] of the freed block.
    #[inline]
    pub fn block(&self) -> u64 {
        block_key(self.address, self.allocator)
    }
}

family! {
    /// A lock wait (futex mode) or a wait-and-hold (uprobe mode).
    LockEvent in LockBatch as Locks {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        mutex: u64 = plain(mutex),
        wait_ns: u64 = plain(wait_ns),
        hold_ns: u64 = plain(hold_ns),
        waker_tid: u32 = plain(waker_tid),
        waker_stack: u64 = plain(waker_stack),
        futex_op: u32 = plain(futex_op),
        source: LockSource = enumeration(source),
        /// 0 or -errno.
        result: i32 = plain(result),
    }
}

family! {
    /// An on-CPU sample.
    CpuSample in CpuSampleBatch as CpuSamples {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        cpu: u32 = plain(cpu),
    }
}

family! {
    /// A block off the CPU.
    OffCpuEvent in OffCpuBatch as Offcpu {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        duration_ns: u64 = plain(duration_ns),
        waker_tid: u32 = plain(waker_tid),
        waker_stack: u64 = plain(waker_stack),
        state: u32 = plain(state),
        /// The off-CPU time the block stands for (0: its duration; see the proto).
        weight_ns: u64 = optional(weight_ns),
        /// From its wake to its switch-in, part of `duration_ns` (0: not known).
        runnable_ns: u64 = optional(runnable_ns),
    }
}

family! {
    /// Heap or mapping growth, or a first-touch page fault.
    MemGrowthEvent in MemGrowthBatch as MemGrowth {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        kind: MemGrowthKind = enumeration(kind),
        size: u64 = plain(size),
        address: u64 = delta(address_delta),
        /// The bytes a sampled page fault stands for (0: its size; see the proto).
        weight: u64 = optional(weight),
    }
}

family! {
    /// A slow system call (`--syscalls`); `time_ns` is its entry.
    SyscallEvent in SyscallBatch as Syscalls {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        nr: u32 = plain(nr),
        duration_ns: u64 = plain(duration_ns),
        ret: i64 = plain(ret),
        /// The time the call stands for (0: its duration; see the proto).
        weight_ns: u64 = optional(weight_ns),
    }
}

family! {
    /// A block I/O request (`--bio`); `time_ns` is its start.
    BioEvent in BioBatch as Bios {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        dev: u32 = plain(dev),
        sector: u64 = plain(sector),
        bytes: u64 = plain(bytes),
        op: u32 = plain(op),
        flags: u32 = plain(flags),
        duration_ns: u64 = plain(duration_ns),
        error: i32 = plain(error),
    }
}

family! {
    /// A run-queue wait (`--runq`); `time_ns` is when the thread became runnable.
    RunqEvent in RunqBatch as Runq {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        duration_ns: u64 = plain(duration_ns),
        preempted: u32 = plain(preempted),
        cpu: u32 = plain(cpu),
        /// The time the wait stands for (0: its duration; see the proto).
        weight_ns: u64 = optional(weight_ns),
    }
}

family! {
    /// An event of a target's TCP connection (`--tcp`).
    TcpEvent in TcpBatch as Tcp {
        generation: u32 = plain(generation),
        tid: u32 = plain(tid),
        stack: u64 = plain(stack),
        conn: u64 = plain(conn),
        kind: TcpEventKind = enumeration(kind),
        state: u32 = plain(state),
        old_state: u32 = plain(old_state),
        local_port: u32 = plain(local_port),
        remote_port: u32 = plain(remote_port),
        bytes_sent: u64 = optional(bytes_sent),
        bytes_received: u64 = optional(bytes_received),
        retransmits: u32 = optional(retransmits),
    }
}

/// A batch's request columns (UsdtBatch, FuncBatch; see the proto), for `push_request`.
macro_rules! request_cols {
    ($b:expr) => {
        (
            [
                &mut $b.request_ns,
                &mut $b.request_on_cpu_ns,
                &mut $b.request_runq_ns,
                &mut $b.request_sleep_ns,
                &mut $b.request_disk_ns,
            ],
            &mut $b.request_blocks,
        )
    };
}

/// The lengths of a batch's request columns, for `check_requests`.
macro_rules! request_lens {
    ($b:expr) => {
        [
            ("request_ns", $b.request_ns.len()),
            ("request_on_cpu_ns", $b.request_on_cpu_ns.len()),
            ("request_runq_ns", $b.request_runq_ns.len()),
            ("request_sleep_ns", $b.request_sleep_ns.len()),
            ("request_disk_ns", $b.request_disk_ns.len()),
            ("request_blocks", $b.request_blocks.len()),
        ]
    };
}

/// Event `i`'s request, from a batch whose request columns `check_requests` passed.
macro_rules! request_at {
    ($b:expr, $i:expr) => {
        ($b.request_ns.get($i).is_some_and(|&ns| ns != 0)).then(|| RequestSplit {
            ns: $b.request_ns[$i],
            on_cpu_ns: $b.request_on_cpu_ns[$i],
            runq_ns: $b.request_runq_ns[$i],
            sleep_ns: $b.request_sleep_ns[$i],
            disk_ns: $b.request_disk_ns[$i],
            blocks: $b.request_blocks[$i],
        })
    };
}

/// Event `i`'s request into the request columns: empty until an event has one, then one
/// value per event (0 for none).
fn push_request(
    (cols, blocks): ([&mut Vec<u64>; 5], &mut Vec<u32>),
    i: usize,
    r: Option<RequestSplit>,
) {
    match r.filter(|r| r.ns != 0) {
        Some(r) => {
            let v = [r.ns, r.on_cpu_ns, r.runq_ns, r.sleep_ns, r.disk_ns];
            for (col, v) in cols.into_iter().zip(v) {
                col.resize(i, 0);
                col.push(v);
            }
            blocks.resize(i, 0);
            blocks.push(r.blocks);
        }
        None if !blocks.is_empty() => {
            for col in cols {
                col.push(0);
            }
            blocks.push(0);
        }
        None => {}
    }
}

/// The request columns are all empty or all of `n` values.
fn check_requests(batch: &str, lens: [(&str, usize); 6], n: usize) -> Result<(), Error> {
    let want = if lens[0].1 == 0 { 0 } else { n };
    for (name, len) in lens {
        if len != want {
            return Err(column_mismatch(batch, name, len, want));
        }
    }
    Ok(())
}

/// A call of a probed function (`--func`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FuncEvent {
    /// Entry time, boottime ns.
    pub time_ns: u64,
    pub generation: u32,
    pub tid: u32,
    pub stack: u64,
    /// `ProbedFunction` id.
    pub function: u64,
    pub duration_ns: u64,
    /// The first integer arguments, when recorded with `--args`.
    pub args: Vec<u64>,
    pub ret: u64,
    /// `--request func:`: the call as a request, as the kernel accounted it.
    pub request: Option<RequestSplit>,
}

/// Most arguments a reader accepts per call (the x86_64 integer argument registers).
pub const MAX_FUNC_ARGS: usize = 6;

impl Family for FuncBatch {
    type Event = FuncEvent;

    fn push(&mut self, st: &mut Deltas, e: &FuncEvent) {
        if self.time_delta.is_empty() {
            self.base_time_ns = e.time_ns;
            st.reset(e.time_ns);
        }
        self.time_delta.push(e.time_ns.wrapping_sub(st.time) as i64);
        st.time = e.time_ns;
        self.generation.push(e.generation);
        self.tid.push(e.tid);
        self.stack.push(e.stack);
        self.function.push(e.function);
        self.duration_ns.push(e.duration_ns);
        let args = &e.args[..e.args.len().min(MAX_FUNC_ARGS)];
        self.arg_count.push(args.len() as u32);
        self.args.extend_from_slice(args);
        self.ret.push(e.ret);
        let i = self.ret.len() - 1;
        push_request(request_cols!(self), i, e.request);
    }

    fn len(&self) -> usize {
        self.time_delta.len()
    }

    fn decode(&self) -> Result<Vec<FuncEvent>, Error> {
        let n = self.time_delta.len();
        for (name, len) in [
            ("generation", self.generation.len()),
            ("tid", self.tid.len()),
            ("stack", self.stack.len()),
            ("function", self.function.len()),
            ("duration_ns", self.duration_ns.len()),
            ("arg_count", self.arg_count.len()),
            ("ret", self.ret.len()),
        ] {
            if len != n {
                return Err(column_mismatch("FuncBatch", name, len, n));
            }
        }
        check_requests("FuncBatch", request_lens!(self), n)?;
        let total: u64 = self.arg_count.iter().map(|&c| u64::from(c)).sum();
        if total != self.args.len() as u64
            || self.arg_count.iter().any(|&c| c as usize > MAX_FUNC_ARGS)
        {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "FuncBatch: arg counts add up to {total}, {} args",
                    self.args.len()
                ),
            ));
        }
        let mut time = self.base_time_ns;
        let mut arg = 0usize;
        Ok((0..n)
            .map(|i| {
                time = time.wrapping_add(self.time_delta[i] as u64);
                let c = self.arg_count[i] as usize;
                let args = self.args[arg..arg + c].to_vec();
                arg += c;
                FuncEvent {
                    time_ns: time,
                    generation: self.generation[i],
                    tid: self.tid[i],
                    stack: self.stack[i],
                    function: self.function[i],
                    duration_ns: self.duration_ns[i],
                    args,
                    ret: self.ret[i],
                    request: request_at!(self, i),
                }
            })
            .collect())
    }

    fn into_record(self) -> Record {
        Record {
            kind: Some(Kind::Funcs(self)),
        }
    }
}

/// A hit of a USDT probe (`--usdt`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsdtEvent {
    /// Time of the hit, boottime ns.
    pub time_ns: u64,
    pub generation: u32,
    pub tid: u32,
    /// User stack (`--usdt-stack`), 0 when not recorded.
    pub stack: u64,
    /// `ProbedUsdt` id.
    pub probe: u64,
    /// The probe's numeric arguments (a string argument is its address).
    pub args: Vec<u64>,
    /// The request this hit of `--request`'s done probe closes, as the kernel accounted it.
    pub request: Option<RequestSplit>,
    /// `--usdt-string`: the bytes of the string argument (target memory; empty: none).
    pub text: Vec<u8>,
}

/// A request's time as the kernel accounted it on its thread (see the proto's UsdtBatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestSplit {
    /// Start to done (the start's hit is at the done's time minus this).
    pub ns: u64,
    pub on_cpu_ns: u64,
    pub runq_ns: u64,
    /// Off CPU, interruptible: locks, condition variables, network, sleeps.
    pub sleep_ns: u64,
    /// Off CPU, uninterruptible: disk, page faults.
    pub disk_ns: u64,
    /// Times it left the CPU blocked.
    pub blocks: u32,
}

/// Most arguments a USDT note can have (and a reader accepts per hit).
pub const MAX_USDT_ARGS: usize = 12;

impl Family for UsdtBatch {
    type Event = UsdtEvent;

    fn push(&mut self, st: &mut Deltas, e: &UsdtEvent) {
        if self.time_delta.is_empty() {
            self.base_time_ns = e.time_ns;
            st.reset(e.time_ns);
        }
        self.time_delta.push(e.time_ns.wrapping_sub(st.time) as i64);
        st.time = e.time_ns;
        self.generation.push(e.generation);
        self.tid.push(e.tid);
        self.stack.push(e.stack);
        self.probe.push(e.probe);
        let args = &e.args[..e.args.len().min(MAX_USDT_ARGS)];
        self.arg_count.push(args.len() as u32);
        self.args.extend_from_slice(args);
        let i = self.probe.len() - 1;
        push_request(request_cols!(self), i, e.request);
        if !e.text.is_empty() || !self.text.is_empty() {
            self.text.resize(i, Vec::new());
            self.text.push(e.text.clone());
        }
    }

    fn len(&self) -> usize {
        self.time_delta.len()
    }

    fn decode(&self) -> Result<Vec<UsdtEvent>, Error> {
        let n = self.time_delta.len();
        for (name, len) in [
            ("generation", self.generation.len()),
            ("tid", self.tid.len()),
            ("stack", self.stack.len()),
            ("probe", self.probe.len()),
            ("arg_count", self.arg_count.len()),
        ] {
            if len != n {
                return Err(column_mismatch("UsdtBatch", name, len, n));
            }
        }
        check_requests("UsdtBatch", request_lens!(self), n)?;
        if !self.text.is_empty() && self.text.len() != n {
            return Err(column_mismatch("UsdtBatch", "text", self.text.len(), n));
        }
        let total: u64 = self.arg_count.iter().map(|&c| u64::from(c)).sum();
        if total != self.args.len() as u64
            || self.arg_count.iter().any(|&c| c as usize > MAX_USDT_ARGS)
        {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!(
                    "UsdtBatch: arg counts add up to {total}, {} args",
                    self.args.len()
                ),
            ));
        }
        let mut time = self.base_time_ns;
        let mut arg = 0usize;
        Ok((0..n)
            .map(|i| {
                time = time.wrapping_add(self.time_delta[i] as u64);
                let c = self.arg_count[i] as usize;
                let args = self.args[arg..arg + c].to_vec();
                arg += c;
                let request = request_at!(self, i);
                UsdtEvent {
                    time_ns: time,
                    generation: self.generation[i],
                    tid: self.tid[i],
                    stack: self.stack[i],
                    probe: self.probe[i],
                    args,
                    request,
                    text: self.text.get(i).cloned().unwrap_or_default(),
                }
            })
            .collect())
    }

    fn into_record(self) -> Record {
        Record {
            kind: Some(Kind::Usdts(self)),
        }
    }
}

/// One row of an `Aggregate` record (--aggregate): what the kernel counted under one stack
/// of one process generation in the interval (since_ns, time_ns].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateRow {
    /// When the counters were read (boottime ns): the end of the interval.
    pub time_ns: u64,
    pub since_ns: u64,
    pub generation: u32,
    pub stack: u64,
    /// Events in the interval (alloc: calls).
    pub count: u64,
    /// alloc: bytes; offcpu: ns off the CPU; lock: ns waited.
    pub sum: u64,
    /// lock: ns held.
    pub sum2: u64,
    /// lock: the lock's address.
    pub mutex: u64,
    /// alloc with frees tracked: blocks and bytes not freed at `time_ns` (None: frees not
    /// tracked).
    pub live: Option<(u64, u64)>,
}

/// The rows of an `Aggregate` record, checking that its columns agree in length.
pub fn aggregate_rows(a: &ebtrace_proto::v1::Aggregate) -> Result<Vec<AggregateRow>, Error> {
    let n = a.generation.len();
    for (name, len) in [("stack", a.stack.len()), ("count", a.count.len())] {
        if len != n {
            return Err(column_mismatch("Aggregate", name, len, n));
        }
    }
    // Optional columns: empty, or one value per row.
    for (name, len) in [
        ("sum", a.sum.len()),
        ("sum2", a.sum2.len()),
        ("mutex", a.mutex.len()),
    ] {
        if len != 0 && len != n {
            return Err(column_mismatch("Aggregate", name, len, n));
        }
    }
    let opt = |c: &[u64], i: usize| c.get(i).copied().unwrap_or(0);
    let live = !a.live_count.is_empty() || !a.live_bytes.is_empty();
    if live && (a.live_count.len() != n || a.live_bytes.len() != n) {
        let bad = if a.live_count.len() != n {
            ("live_count", a.live_count.len())
        } else {
            ("live_bytes", a.live_bytes.len())
        };
        return Err(column_mismatch("Aggregate", bad.0, bad.1, n));
    }
    Ok((0..n)
        .map(|i| AggregateRow {
            time_ns: a.time_ns,
            since_ns: a.since_ns,
            generation: a.generation[i],
            stack: a.stack[i],
            count: a.count[i],
            sum: opt(&a.sum, i),
            sum2: opt(&a.sum2, i),
            mutex: opt(&a.mutex, i),
            live: live.then(|| (a.live_count[i], a.live_bytes[i])),
        })
        .collect())
}

/// One row of a `LatencyHistogram` record: what the kernel counted for one key of one
/// process generation in the interval (since_ns, time_ns].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistogramRow {
    pub time_ns: u64,
    pub since_ns: u64,
    pub generation: u32,
    /// syscall: the number; bio: dev << 8 | op; runq: 0.
    pub key: u64,
    pub count: u64,
    pub sum_ns: u64,
    /// The longest since the recording started.
    pub max_ns: u64,
    /// (bucket, count) pairs, each bucket below `layout.buckets()`.
    pub buckets: Vec<(u32, u64)>,
    /// What the buckets hold (the record's `sub_buckets`).
    pub layout: crate::latency::Layout,
}

/// The rows of a `LatencyHistogram` record, checking that its columns agree.
pub fn histogram_rows(h: &ebtrace_proto::v1::LatencyHistogram) -> Result<Vec<HistogramRow>, Error> {
    let n = h.generation.len();
    for (name, len) in [
        ("key", h.key.len()),
        ("count", h.count.len()),
        ("sum_ns", h.sum_ns.len()),
        ("max_ns", h.max_ns.len()),
        ("nbuckets", h.nbuckets.len()),
    ] {
        if len != n {
            return Err(column_mismatch("LatencyHistogram", name, len, n));
        }
    }
    let pairs: u64 = h.nbuckets.iter().map(|&b| u64::from(b)).sum();
    if h.bucket.len() as u64 != pairs || h.bucket_count.len() as u64 != pairs {
        return Err(column_mismatch(
            "LatencyHistogram",
            "bucket",
            h.bucket.len().min(h.bucket_count.len()),
            pairs as usize,
        ));
    }
    let Some(layout) = crate::latency::Layout::from_sub_buckets(h.sub_buckets) else {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "LatencyHistogram: unknown bucket layout (sub_buckets {})",
                h.sub_buckets
            ),
        ));
    };
    let mut at = 0usize;
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let k = h.nbuckets[i] as usize;
        let mut buckets = Vec::with_capacity(k);
        for j in at..at + k {
            if h.bucket[j] >= layout.buckets() {
                return Err(Error::new(
                    ErrorKind::Corrupt,
                    format!("LatencyHistogram: bucket {} out of range", h.bucket[j]),
                ));
            }
            buckets.push((h.bucket[j], h.bucket_count[j]));
        }
        at += k;
        rows.push(HistogramRow {
            time_ns: h.time_ns,
            since_ns: h.since_ns,
            generation: h.generation[i],
            key: h.key[i],
            count: h.count[i],
            sum_ns: h.sum_ns[i],
            max_ns: h.max_ns[i],
            buckets,
            layout,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod histogram_tests {
    use super::*;
    use ebtrace_proto::v1::LatencyHistogram;

    fn two_rows() -> LatencyHistogram {
        LatencyHistogram {
            time_ns: 2_000,
            since_ns: 1_000,
            family: 10,
            generation: vec![1, 1],
            key: vec![35, 110],
            count: vec![10, 1000],
            sum_ns: vec![52_000_000, 120_000],
            max_ns: vec![5_300_000, 900],
            nbuckets: vec![1, 2],
            bucket: vec![22, 6, 7],
            bucket_count: vec![10, 800, 200],
            sub_buckets: 0,
        }
    }

    #[test]
    fn rows_take_their_own_buckets() {
        let rows = histogram_rows(&two_rows()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].key, rows[0].count), (35, 10));
        assert_eq!(rows[0].buckets, vec![(22, 10)]);
        assert_eq!(rows[1].buckets, vec![(6, 800), (7, 200)]);
        assert_eq!((rows[1].since_ns, rows[1].time_ns), (1_000, 2_000));
        assert_eq!(rows[0].layout, crate::latency::Layout::Log2);
    }

    #[test]
    fn a_log_linear_record_takes_buckets_up_to_527() {
        let mut h = two_rows();
        h.sub_buckets = 16;
        h.bucket[0] = 527;
        let rows = histogram_rows(&h).unwrap();
        assert_eq!(rows[0].layout, crate::latency::Layout::LogLinear);
        assert_eq!(rows[0].buckets, vec![(527, 10)]);
        h.bucket[0] = 528;
        assert!(histogram_rows(&h).is_err());
        // A log2 record stops at 39; a layout this reader does not know is an error.
        let mut h = two_rows();
        h.bucket[0] = 39;
        assert!(histogram_rows(&h).is_ok());
        h.sub_buckets = 32;
        assert!(histogram_rows(&h).is_err());
    }

    #[test]
    fn a_malformed_histogram_is_an_error_not_a_panic() {
        let mut h = two_rows();
        h.nbuckets = vec![1, 5]; // more pairs than the columns hold
        assert!(histogram_rows(&h).is_err());
        let mut h = two_rows();
        h.count.pop();
        assert!(histogram_rows(&h).is_err());
        let mut h = two_rows();
        h.bucket[0] = crate::latency::LOG2_BUCKETS; // out of range
        assert!(histogram_rows(&h).is_err());
        let mut h = two_rows();
        h.nbuckets = vec![u32::MAX, u32::MAX];
        assert!(histogram_rows(&h).is_err());
    }
}

/// What an event kept by a time-weighted sample stands for: (ns, events). `weight_ns` 0:
/// itself, (duration, 1); else duration/p ns and 1/p events (rounded), p = duration/weight.
pub fn weighted(duration_ns: u64, weight_ns: u64) -> (u64, u64) {
    if weight_ns == 0 {
        return (duration_ns, 1);
    }
    let n = if duration_ns == 0 || weight_ns <= duration_ns {
        1
    } else {
        (weight_ns + duration_ns / 2) / duration_ns
    };
    (weight_ns, n)
}

impl SyscallEvent {
    /// The time the call stands for in totals (see [`weighted`]).
    pub fn weight(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).0
    }

    /// The calls it stands for: 1, or 1/p for a sampled call.
    pub fn calls(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).1
    }
}

impl RunqEvent {
    /// The time the wait stands for in totals (see [`weighted`]).
    pub fn weight(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).0
    }

    /// The waits it stands for: 1, or 1/p for a sampled wait.
    pub fn waits(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).1
    }
}

impl MemGrowthEvent {
    /// The bytes the event stands for in totals: its size, or, for a first-touch fault kept
    /// by `--memgrowth-sample`'s byte-weighted sample with probability p, size / p.
    pub fn bytes(&self) -> u64 {
        weighted(self.size, self.weight).0
    }

    /// The events it stands for: 1, or 1/p (rounded) for a sampled fault.
    pub fn count(&self) -> u64 {
        weighted(self.size, self.weight).1
    }
}

impl OffCpuEvent {
    /// The off-CPU time the block stands for in totals: its duration, or, for a block kept
    /// by `--offcpu-sample`'s time-weighted sample with probability p, duration / p.
    pub fn weight(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).0
    }

    /// The blocks it stands for: 1, or 1/p (rounded) for a sampled block.
    pub fn blocks(&self) -> u64 {
        weighted(self.duration_ns, self.weight_ns).1
    }
}

#[cfg(test)]
mod delta_tests {
    use super::*;

    /// Addresses are deltas per thread: with a few threads (the table searched) and with
    /// many (past 64, the index), in and out of runs, they come back as written.
    #[test]
    fn per_thread_deltas_round_trip_with_few_and_many_threads() {
        for threads in [1u32, 3, 64, 65, 300] {
            let mut b = FreeBatch::default();
            let mut st = Deltas::default();
            let evs: Vec<FreeEvent> = (0..2000u64)
                .map(|i| FreeEvent {
                    time_ns: 1000 + i,
                    generation: 1,
                    tid: ((i * 7919) % u64::from(threads)) as u32 + 10,
                    address: 0x7f00_0000_0000
                        + (i * 48) % 100_000
                        + u64::from((i % 5) as u32) * (1 << 32),
                    allocator: (i % 2) as u32,
                })
                .collect();
            for e in &evs {
                b.push(&mut st, e);
            }
            assert_eq!(b.decode().unwrap(), evs, "{threads} threads");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdt_batch_round_trips_and_rejects_bad_arg_counts() {
        let events = vec![
            UsdtEvent {
                time_ns: 1_000,
                generation: 1,
                tid: 7,
                stack: 3,
                probe: 1,
                args: vec![42, u64::MAX],
                request: None,
                text: Vec::new(),
            },
            UsdtEvent {
                time_ns: 900,
                generation: 1,
                tid: 8,
                stack: 0,
                probe: 2,
                args: vec![],
                request: Some(RequestSplit {
                    ns: 100,
                    on_cpu_ns: 40,
                    runq_ns: 10,
                    sleep_ns: 30,
                    disk_ns: 20,
                    blocks: 2,
                }),
                text: b"SELECT 1;".to_vec(),
            },
        ];
        let mut b = UsdtBatch::default();
        let mut st = Deltas::default();
        for e in &events {
            b.push(&mut st, e);
        }
        assert_eq!(b.decode().unwrap(), events);
        // the request columns: one value per event once one has a request
        assert_eq!(b.request_ns, [0, 100]);
        assert_eq!(b.text, [b"".to_vec(), b"SELECT 1;".to_vec()]);
        b.request_blocks.pop();
        assert!(b.decode().is_err());
        b.request_blocks.push(2);
        b.arg_count[1] = 1;
        assert!(b.decode().is_err());
    }
}
