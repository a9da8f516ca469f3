//! Decoding the BPF events into trace records: stacks (the caller at `[sp]`, frames that
//! left the code, kernel frames) and each family's event.
use super::*;

/// A stack as an event carries it ([`Session::stack`]): `user[..n]` and `kernel` frames,
/// leaf first, its `StackFlag` bits, and the id of its user stack copy (0: none).
pub(super) struct RawStack<'a> {
    pub user: &'a [u64],
    pub n: u32,
    pub kernel: &'a [u64],
    pub flags: u32,
    pub copy_id: u64,
}

impl<'a> RawStack<'a> {
    /// A stack whose `ips` hold the kernel frames first, then the user frames (block I/O
    /// and run-queue events), each count clamped to what `ips` holds.
    fn kernel_first(ips: &'a [u64], kframes: u32, nframes: u32, flags: u32, copy_id: u64) -> Self {
        let (kernel, rest) = take_frames(ips, kframes);
        let (user, _) = take_frames(rest, nframes);
        RawStack {
            user,
            n: user.len() as u32,
            kernel,
            flags,
            copy_id,
        }
    }
}

impl Session<'_> {
    /// The id of a stack of generation `g`: `user[..n]` and `kernel` frames, leaf first.
    /// Kernel frames of a new stack queue their kallsyms entries for the next KernelSymbols
    /// record.
    pub(super) fn stack(&mut self, g: u32, s: RawStack<'_>) -> Result<u64> {
        let RawStack {
            user,
            n,
            kernel,
            flags,
            copy_id,
        } = s;
        let n = (n as usize).min(user.len());
        let kernel = if kernel.is_empty() {
            kernel
        } else {
            self.kernel.strip_tracer(kernel)
        };
        if n == 0 && kernel.is_empty() {
            return Ok(0);
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.extend_from_slice(&user[..n]);
        // At an entry probe frame 1 is the caller read from [sp]; if the kernel had added
        // it too (functions starting with push %rbp), frame 2 repeats it.
        if flags & StackFlag::CallerFromSp as u32 != 0
            && frames.len() >= 3
            && frames[1] == frames[2]
        {
            frames.remove(2);
        }
        let mut flags = flags;
        // A walk by unwind rows that found rows for every pc stayed in the code: only
        // frame-pointer steps and stops at unknown pcs need the check.
        let clean_cfi = flags & StackFlag::UserCfi as u32 != 0
            && flags
                & (StackFlag::UserFpSteps as u32
                    | StackFlag::UserNoTable as u32
                    | StackFlag::UserNoRows as u32
                    | StackFlag::UserUnknownMapping as u32
                    | StackFlag::UserBadFrame as u32)
                == 0;
        if let Some(cut) = (!clean_cfi).then(|| self.left_code(g, &frames)).flatten() {
            frames.truncate(cut);
            flags |= StackFlag::UserLeftCode as u32;
        }
        self.stack_quality
            .note(self.family, n > 0 || flags != 0, flags);
        let copy = if copy_id != 0 {
            let c = self.pending_copies.remove(&copy_id);
            if c.is_none() {
                self.copies_missing += 1;
            }
            c
        } else {
            None
        };
        let before = self.w.stats().stacks;
        let id = match copy {
            // A stack with a copy is its own record: two copies are rarely equal.
            Some(c) => {
                self.kept[EventFamily::StackCopy] += 1;
                self.w.write_stack_copy(Stack {
                    id: 0,
                    generation: g,
                    user_ips: frames.clone(),
                    kernel_ips: kernel.to_vec(),
                    flags,
                    copy: Some(UserStackCopy {
                        // DWARF x86_64 numbering: rbp 6, rsp 7, return address (rip) 16.
                        regs: vec![c.bp, c.sp, c.ip],
                        reg_mask: (1 << 6) | (1 << 7) | (1 << 16),
                        sp: c.sp,
                        data: c.data,
                    }),
                })
            }
            None => self.w.intern_stack(g, &frames, kernel, flags),
        };
        self.frames = frames;
        if !kernel.is_empty() && self.w.stats().stacks != before {
            self.kernel.note(kernel);
        }
        Ok(id?)
    }
    /// Where a frame-pointer walk went astray: the first return address (frame 1 on) that
    /// is in no executable mapping of generation `g`. None when all are, or when the
    /// generation's mappings are unknown (nothing to judge by).
    pub(super) fn left_code(&self, g: u32, frames: &[u64]) -> Option<usize> {
        let gen = self.gens.get(g as usize - 1)?;
        if gen.maps.is_empty() {
            return None;
        }
        let exec = &gen.exec;
        frames.iter().enumerate().skip(1).find_map(|(i, &ip)| {
            // The range starting last at or before ip; ranges may overlap (a remapped
            // file), so a miss there is checked against all before saying "outside".
            let near = exec.partition_point(|r| r.0 <= ip);
            let inside = near.checked_sub(1).is_some_and(|j| ip < exec[j].1)
                || exec.iter().any(|r| r.0 <= ip && ip < r.1);
            (!inside).then_some(i)
        })
    }
    /// Decodes and writes one BPF event.
    pub fn event(&mut self, data: &[u8]) -> Result<()> {
        if data.len() < std::mem::size_of::<probes::event_header>() {
            self.malformed += 1;
            return Ok(());
        }
        let h: probes::event_header = probes::read_event(data);
        if h.r#type == EventFamily::StackCopy as u32 {
            self.keep_copy(data);
            return Ok(());
        }
        if h.r#type == EventFamily::Process as u32 {
            let e: probes::fork_hold_event = probes::read_event(data);
            return self.held_child(h.pid, e.stopped != 0, h.time_ns);
        }
        let g = self.gen_or_snapshot(h.pid, h.time_ns)?;
        if h.r#type == probes::EV_THREAD_NAME as u32 {
            let e: probes::thread_name_event = probes::read_event(data);
            let name: Vec<u8> = e
                .comm
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            return self.thread_renamed(g, h.tid, &name, h.time_ns);
        }
        self.thread_seen(g, h.pid, h.tid, h.time_ns)?;
        self.family = h.r#type as usize;
        match h.r#type {
            t if t == EventFamily::Alloc as u32 => self.decode_alloc(&h, g, data)?,
            t if t == EventFamily::Free as u32 => self.decode_free(&h, g, data)?,
            t if t == EventFamily::Lock as u32 => self.decode_lock(&h, g, data)?,
            t if t == EventFamily::Cpu as u32 => self.decode_cpu_sample(&h, g, data)?,
            t if t == EventFamily::Offcpu as u32 => self.decode_offcpu(&h, g, data)?,
            t if t == EventFamily::Func as u32 => self.decode_func(&h, g, data)?,
            t if t == EventFamily::MemGrowth as u32 => self.decode_mem_growth(&h, g, data)?,
            t if t == EventFamily::Syscall as u32 => self.decode_syscall(&h, g, data)?,
            t if t == EventFamily::Bio as u32 => self.decode_bio(&h, g, data)?,
            t if t == EventFamily::Runq as u32 => self.decode_runq(&h, g, data)?,
            t if t == EventFamily::Tcp as u32 => self.decode_tcp(&h, g, data)?,
            t if t == EventFamily::Usdt as u32 => self.decode_usdt(&h, g, data)?,
            _ => self.malformed += 1,
        }
        Ok(())
    }

    /// Decodes and writes an allocation, of generation `g`.
    fn decode_alloc(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::alloc_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips,
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        self.w.alloc(&AllocEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            size: e.size,
            address: e.addr,
            kind: AllocKind::try_from(e.kind as i32).unwrap_or_default(),
            sample_period: e.sample_period,
            allocator: e.allocator,
        })?;
        self.kept[EventFamily::Alloc] += 1;
        Ok(())
    }

    /// Decodes and writes a free, of generation `g`.
    fn decode_free(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::free_event = probes::read_event(data);
        self.w.free(&FreeEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            address: e.addr,
            allocator: e.allocator,
        })?;
        self.kept[EventFamily::Free] += 1;
        Ok(())
    }

    /// Decodes and writes a lock wait (and its waker), of generation `g`.
    fn decode_lock(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::lock_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips[..probes::MAX_FRAMES],
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        let waker_stack = self.stack(
            g,
            RawStack {
                user: &e.ips[probes::MAX_FRAMES..],
                n: e.waker_nframes,
                kernel: &[],
                flags: e.waker_flags,
                copy_id: 0,
            },
        )?;
        self.w.lock(&LockEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            mutex: e.uaddr,
            wait_ns: e.wait_ns,
            hold_ns: e.hold_ns,
            waker_tid: e.waker_tid,
            waker_stack,
            futex_op: e.op,
            source: LockSource::try_from(e.source as i32).unwrap_or_default(),
            result: e.ret,
        })?;
        self.kept[EventFamily::Lock] += 1;
        Ok(())
    }

    /// Decodes and writes a CPU sample, of generation `g`.
    fn decode_cpu_sample(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::sample_event = probes::read_event(data);
        let (user, kernel) = split_frames(&e.ips, e.nframes, e.kframes);
        let stack = self.stack(
            g,
            RawStack {
                user,
                n: user.len() as u32,
                kernel,
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        self.w.cpu_sample(&CpuSample {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            cpu: h.cpu,
        })?;
        self.kept[EventFamily::Cpu] += 1;
        Ok(())
    }

    /// Decodes and writes an off-CPU block (and its waker), of generation `g`.
    fn decode_offcpu(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::offcpu_event = probes::read_event(data);
        let not_at_exit = e.flags & StackFlag::UserNotAtExit as u32 != 0;
        // A block sent without its user stack because the thread blocked again before it
        // went back to user space (a second block in the same system call) waits for the
        // thread's next block: if that one has the same user registers, the thread has not
        // been in user space in between and its user stack is this one's too.
        if not_at_exit && e.nframes == 0 && e.user_ip != 0 && e.copy_id == 0 {
            let held = self.same_call.entry(h.tid).or_default();
            if held.len() < SAME_CALL_HELD {
                held.push((*h, g, data.to_vec()));
                return Ok(());
            }
        }
        if let Some(held) = self.same_call.remove(&h.tid) {
            let (_, _, _, user) = offcpu_frames(&e);
            let later = (!not_at_exit && !user.is_empty() && e.copy_id == 0)
                .then_some((user, e.flags & !KERNEL_FLAGS));
            for (hh, hg, d) in held {
                let he: probes::offcpu_event = probes::read_event(&d);
                let fill = later.filter(|_| {
                    hg == g && hh.pid == h.pid && he.user_ip == e.user_ip && he.user_sp == e.user_sp
                });
                if fill.is_some() {
                    self.same_call_filled += 1;
                }
                self.write_offcpu(&hh, hg, &he, fill)?;
            }
        }
        self.write_offcpu(h, g, &e, None)
    }

    /// Writes the blocks held for their system call's user stack, as they are (the end
    /// of each drain: the next block of the thread comes microseconds later, in the same
    /// drain but rarely).
    pub(super) fn flush_same_call(&mut self) -> Result<()> {
        if self.same_call.is_empty() {
            return Ok(());
        }
        for (_, held) in std::mem::take(&mut self.same_call) {
            for (h, g, d) in held {
                let e: probes::offcpu_event = probes::read_event(&d);
                self.write_offcpu(&h, g, &e, None)?;
            }
        }
        Ok(())
    }

    /// Writes an off-CPU block, of generation `g`; `user`: the user frames and their flags
    /// of a later block of the same system call, for one that has none.
    fn write_offcpu(
        &mut self,
        h: &probes::event_header,
        g: u32,
        e: &probes::offcpu_event,
        user: Option<(&[u64], u32)>,
    ) -> Result<()> {
        let (wuser, wkernel, kernel, own_user) = offcpu_frames(e);
        let (user, flags) = match user {
            Some((u, f)) => (u, (e.flags & KERNEL_FLAGS) | f),
            None => (own_user, e.flags),
        };
        let stack = self.stack(
            g,
            RawStack {
                user,
                n: user.len() as u32,
                kernel,
                flags,
                copy_id: e.copy_id,
            },
        )?;
        // The waker's user frames are addresses in *its* process: kept only when
        // that process is known (a target), under its own generation. A wake from
        // an interrupt names whoever was running: the kernel frames tell.
        // Its generation at the wake (the switch-in, at most a run-queue wait
        // after it), not at the block's start: a child that woke its parent may
        // have exec'd in between (flock's `sleep`, stopped).
        let (wg, wuser) = if e.waker_pid == h.pid {
            (g, wuser)
        } else {
            match self.gen_at(e.waker_pid, h.time_ns.saturating_add(e.duration_ns)) {
                Some(wg) => (wg, wuser),
                None => {
                    // (The kernel side takes no user stack of a process that is
                    // not a target: only its kernel frames come.)
                    if !wuser.is_empty() || !wkernel.is_empty() {
                        self.waker_frames_dropped += 1;
                    }
                    (g, &[][..])
                }
            }
        };
        let waker_stack = if e.waker_tid != 0 {
            self.stack(
                wg,
                RawStack {
                    user: wuser,
                    n: wuser.len() as u32,
                    kernel: wkernel,
                    flags: e.waker_flags,
                    copy_id: 0,
                },
            )?
        } else {
            0
        };
        self.w.offcpu(&OffCpuEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            duration_ns: e.duration_ns,
            waker_tid: e.waker_tid,
            waker_stack,
            state: e.state,
            // 0: the block stands for itself (kept whatever its length)
            weight_ns: if e.weight_ns == e.duration_ns {
                0
            } else {
                e.weight_ns
            },
            runnable_ns: e.runnable_ns,
        })?;
        self.kept[EventFamily::Offcpu] += 1;
        Ok(())
    }

    /// Decodes and writes a --func call, of generation `g`.
    fn decode_func(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::func_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips,
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        let nargs = (e.nargs as usize).min(e.args.len());
        let request = self.request_done(&e.req);
        self.w.func(&FuncEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            function: e.function,
            duration_ns: e.duration_ns,
            args: e.args[..nargs].to_vec(),
            ret: e.ret,
            request,
        })?;
        self.kept[EventFamily::Func] += 1;
        Ok(())
    }

    /// Decodes and writes a --usdt hit, of generation `g` (stack 0 without --usdt-stack).
    fn decode_usdt(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::usdt_event = probes::read_event(data);
        let stack = if e.nframes == 0 && e.copy_id == 0 {
            0
        } else {
            self.stack(
                g,
                RawStack {
                    user: &e.ips,
                    n: e.nframes,
                    kernel: &[],
                    flags: e.flags,
                    copy_id: e.copy_id,
                },
            )?
        };
        if e.held_probe != 0 {
            // --request: the start hit the kernel held for this done, written as its own
            self.w.usdt(&UsdtEvent {
                time_ns: e.held_time,
                generation: g,
                tid: h.tid,
                stack: 0,
                probe: e.held_probe,
                args: e.held_args[..(e.held_nargs as usize).min(e.held_args.len())].to_vec(),
                request: None,
                text: Vec::new(),
            })?;
            self.kept[EventFamily::Usdt] += 1;
        }
        let nargs = (e.nargs as usize).min(e.args.len());
        let request = self.request_done(&e.req);
        self.w.usdt(&UsdtEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            probe: e.probe,
            args: e.args[..nargs].to_vec(),
            request,
            text: usdt_text(&e),
        })?;
        self.kept[EventFamily::Usdt] += 1;
        Ok(())
    }

    /// Decodes and writes a memory growth, of generation `g`.
    fn decode_mem_growth(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::mem_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips,
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        self.w.mem_growth(&MemGrowthEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            kind: MemGrowthKind::try_from(e.kind as i32).unwrap_or_default(),
            size: e.size,
            address: e.addr,
            weight: e.weight,
        })?;
        self.kept[EventFamily::MemGrowth] += 1;
        Ok(())
    }

    /// Decodes and writes a slow system call, of generation `g`.
    fn decode_syscall(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::syscall_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips,
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        self.w.syscall(&SyscallEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            nr: e.nr,
            duration_ns: e.duration_ns,
            ret: e.ret,
            weight_ns: e.weight_ns,
        })?;
        self.kept[EventFamily::Syscall] += 1;
        Ok(())
    }

    /// Decodes and writes a block I/O request (and its device, once), of generation `g`.
    fn decode_bio(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::bio_event = probes::read_event(data);
        let raw = RawStack::kernel_first(&e.ips, e.kframes, e.nframes, e.flags, e.copy_id);
        let stack = self.stack(g, raw)?;
        self.block_device(e.dev)?;
        self.w.bio(&BioEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            dev: e.dev,
            sector: e.sector,
            bytes: e.bytes,
            op: e.op,
            flags: e.bio_flags,
            duration_ns: e.duration_ns,
            error: e.error,
        })?;
        self.kept[EventFamily::Bio] += 1;
        Ok(())
    }

    /// Decodes and writes a run-queue wait, of generation `g`.
    fn decode_runq(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::runq_event = probes::read_event(data);
        let raw = RawStack::kernel_first(&e.ips, e.kframes, e.nframes, e.flags, e.copy_id);
        let stack = self.stack(g, raw)?;
        self.w.runq(&RunqEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            duration_ns: e.duration_ns,
            preempted: e.preempted,
            cpu: h.cpu,
            weight_ns: e.weight_ns,
        })?;
        self.kept[EventFamily::Runq] += 1;
        Ok(())
    }

    /// Decodes and writes a TCP event (and its connection, once), of generation `g`.
    fn decode_tcp(&mut self, h: &probes::event_header, g: u32, data: &[u8]) -> Result<()> {
        let e: probes::tcp_event = probes::read_event(data);
        let stack = self.stack(
            g,
            RawStack {
                user: &e.ips,
                n: e.nframes,
                kernel: &[],
                flags: e.flags,
                copy_id: e.copy_id,
            },
        )?;
        if self.tcp_written.insert(e.conn) {
            let len = if e.family == 6 { 16 } else { 4 };
            self.w.write_record(&Record {
                kind: Some(Kind::TcpConnection(TcpConnection {
                    id: e.conn,
                    generation: g,
                    local_addr: e.laddr[..len].to_vec(),
                    local_port: e.lport.into(),
                    remote_addr: e.raddr[..len].to_vec(),
                    remote_port: e.rport.into(),
                    start_ns: e.start_ns,
                })),
            })?;
        }
        self.w.tcp(&TcpEvent {
            time_ns: h.time_ns,
            generation: g,
            tid: h.tid,
            stack,
            conn: e.conn,
            kind: TcpEventKind::try_from(e.kind as i32).unwrap_or_default(),
            state: e.state,
            old_state: e.old_state,
            local_port: e.lport.into(),
            remote_port: e.rport.into(),
            bytes_sent: e.bytes_sent,
            bytes_received: e.bytes_received,
            retransmits: e.retransmits,
        })?;
        self.kept[EventFamily::Tcp] += 1;
        Ok(())
    }

    /// Describes block device `dev` (a kernel dev_t, major << 20 | minor) once per file,
    /// with its name on this host (/sys/dev/block/MAJ:MIN/uevent's DEVNAME).
    pub(super) fn block_device(&mut self, dev: u32) -> Result<()> {
        if !self.devices_written.insert(dev) {
            return Ok(());
        }
        let (major, minor) = (dev >> 20, dev & 0xfffff);
        let name = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
            .ok()
            .and_then(|u| {
                u.lines()
                    .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
            })
            .unwrap_or_default();
        self.w.write_record(&Record {
            kind: Some(Kind::BlockDevice(BlockDevice {
                dev,
                major,
                minor,
                name,
            })),
        })?;
        Ok(())
    }
}

/// The first `n` frames of `ips` and the rest, clamped to `ips`.
fn take_frames(ips: &[u64], n: u32) -> (&[u64], &[u64]) {
    ips.split_at((n as usize).min(ips.len()))
}

/// `ips[..nframes]` (user) and the `kframes` after them (kernel), clamped to `ips`.
fn split_frames(ips: &[u64], nframes: u32, kframes: u32) -> (&[u64], &[u64]) {
    let n = (nframes as usize).min(ips.len());
    let k = (kframes as usize).min(ips.len() - n);
    (&ips[..n], &ips[n..n + k])
}

/// `--usdt-string`'s bytes: after the hit's frames in `ips`, without their NUL.
fn usdt_text(e: &probes::usdt_event) -> Vec<u8> {
    if e.str_len == 0 {
        return Vec::new();
    }
    let at = (e.nframes as usize).min(e.ips.len());
    let mut s: Vec<u8> = e.ips[at..]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(e.str_len as usize)
        .collect();
    if s.last() == Some(&0) {
        s.pop();
    }
    s
}

impl Session<'_> {
    /// The request the kernel accounted (`req_out`), if the event closes one, counted for
    /// --request-slow's adaptive threshold.
    fn request_done(&mut self, o: &probes::req_out) -> Option<RequestSplit> {
        let r = request_split(o)?;
        if let Some(t) = self.slow_tail.as_mut() {
            t.done(r.ns);
        }
        Some(r)
    }
}

/// Off-CPU blocks held at most per thread for their system call's user stack.
const SAME_CALL_HELD: usize = 64;

/// The stack flags about the kernel stack (kept when a block gets a later block's user
/// stack).
const KERNEL_FLAGS: u32 = StackFlag::KernelTruncated as u32 | StackFlag::KernelSwitchUnseen as u32;

/// An off-CPU event's frames, in the order the kernel side took them in `ips`: the waker's
/// user and kernel frames, the blocked thread's kernel frames, then its user frames.
fn offcpu_frames(e: &probes::offcpu_event) -> (&[u64], &[u64], &[u64], &[u64]) {
    let (wuser, rest) = take_frames(&e.ips, e.waker_nframes);
    let (wkernel, rest) = take_frames(rest, e.waker_kframes);
    let (kernel, rest) = take_frames(rest, e.kframes);
    let (user, _) = take_frames(rest, e.nframes);
    (wuser, wkernel, kernel, user)
}

/// A request the kernel accounted (`req_out`), if the event closes one.
fn request_split(o: &probes::req_out) -> Option<RequestSplit> {
    (o.ns != 0).then_some(RequestSplit {
        ns: o.ns,
        on_cpu_ns: o.split[0],
        runq_ns: o.split[1],
        sleep_ns: o.split[2],
        disk_ns: o.split[3],
        blocks: o.blocks,
    })
}
