//! Thread names: each thread the events name gets a `Thread` record before its first event
//! in each file, with the kernel's comm of the thread, read from /proc/PID/task/TID/comm
//! the first time the recorder sees it (by then a thread has usually named itself: a
//! pool's workers call pthread_setname_np as they start). A thread gone before that read
//! has no name in the trace (reports fall back to the process's comm); counted.
use super::*;
use ebtrace_format::proto::{record::Kind, Record, Thread};

#[derive(Default)]
pub(super) struct Threads {
    /// (generation, tid) -> the name read, or None when the thread was gone.
    names: HashMap<(u32, u32), Option<Vec<u8>>>,
    /// The threads whose Thread record the current file has.
    written: ebtrace_format::hash::FastSet<(u32, u32)>,
    /// The last (generation, tid) found in `written`: most events follow one of the
    /// same thread.
    last: Option<(u32, u32)>,
}

impl Threads {
    /// A new file (rotation, the agent's window): its threads are written again at their
    /// next event. Names of generations that ended are forgotten with them.
    pub(super) fn new_file(&mut self, live: impl Fn(u32) -> bool) {
        self.written.clear();
        self.last = None;
        self.names.retain(|&(g, _), _| live(g));
    }
}

fn read_comm(pid: u32, tid: u32) -> Option<Vec<u8>> {
    let mut b = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    if b.last() == Some(&b'\n') {
        b.pop();
    }
    Some(b)
}

impl Session<'_> {
    /// Before an event of thread `tid` (of `pid`, generation `g`) at `time_ns`: its Thread
    /// record, once per file.
    pub(super) fn thread_seen(&mut self, g: u32, pid: u32, tid: u32, time_ns: u64) -> Result<()> {
        if tid == 0 || self.threads.last == Some((g, tid)) {
            return Ok(());
        }
        if self.threads.written.contains(&(g, tid)) {
            self.threads.last = Some((g, tid));
            return Ok(());
        }
        self.threads.written.insert((g, tid));
        let name = match self.threads.names.get(&(g, tid)) {
            Some(n) => n.clone(),
            None => {
                let n = read_comm(pid, tid);
                self.threads.names.insert((g, tid), n.clone());
                n
            }
        };
        if let Some(n) = name {
            self.write_thread(g, tid, &n, time_ns)?;
        }
        Ok(())
    }

    /// A thread renamed itself (task_rename): its new name from `time_ns` on.
    pub(super) fn thread_renamed(
        &mut self,
        g: u32,
        tid: u32,
        name: &[u8],
        time_ns: u64,
    ) -> Result<()> {
        self.threads.names.insert((g, tid), Some(name.to_vec()));
        self.threads.written.insert((g, tid));
        self.write_thread(g, tid, name, time_ns)
    }

    fn write_thread(&mut self, g: u32, tid: u32, name: &[u8], time_ns: u64) -> Result<()> {
        let name = self.w.intern_string(name)?;
        self.w.write_record(&Record {
            kind: Some(Kind::Thread(Thread {
                generation: g,
                tid,
                name,
                time_ns,
            })),
        })?;
        Ok(())
    }
}
