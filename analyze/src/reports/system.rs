//! The system families' own reports: `ebsym latency --kind syscall|bio|runq` (from the
//! kernel's histograms, which count every call, request and wait), `ebsym tcp`
//! (connections per remote address), and the points of `ebsym heatmap`; with the names
//! they print (syscalls by the recording host's architecture, block devices and ops, TCP
//! states).
use super::heatmap::HeatPoint;
use super::kind::EventKind;
use super::names::bio_name;
use super::text::{empty_note, log2_text, losses_text};
use crate::histogram::Log2Bin;
use crate::model::{Event, Filter, Loaded, Losses, Sink, Trace};
use ebtrace_format::events::HistogramRow;
use ebtrace_format::latency::{Layout, LOG2_BUCKETS};
use ebtrace_format::proto::{EventFamily, TcpEventKind};
use serde::Serialize;
use std::collections::BTreeMap;

pub use super::names::{bio_flags_text, bio_op_name, device_name, syscall_name, tcp_state_name};
pub use super::text::human_ns;

/// A kernel latency histogram (of one row, summed over its records) with exact count, sum
/// and maximum, its buckets in the trace's layout (`ebtrace_format::latency`: log-linear,
/// or log2 in traces of an older ebrec).
#[derive(Debug, Clone, Default)]
pub(crate) struct KernelHist {
    pub(crate) layout: Layout,
    /// Counts by bucket of `layout` (empty before the first row).
    pub(crate) buckets: Vec<u64>,
    pub(crate) count: u64,
    pub(crate) sum: u64,
    pub(crate) max: u64,
}

impl KernelHist {
    pub(crate) fn add_row(&mut self, r: &HistogramRow) {
        if self.buckets.is_empty() {
            self.layout = r.layout;
            self.buckets = vec![0; r.layout.buckets() as usize];
        } else if r.layout != self.layout {
            // Rows of two layouts under one key (two ebrec versions' records): both in the
            // coarser log2 buckets.
            self.coarsen_to_log2();
        }
        let last = self.buckets.len() - 1;
        for &(b, c) in &r.buckets {
            let b = if r.layout == self.layout {
                b
            } else {
                r.layout.log2_bucket(b)
            };
            self.buckets[(b as usize).min(last)] += c;
        }
        self.count += r.count;
        self.sum = self.sum.saturating_add(r.sum_ns);
        self.max = self.max.max(r.max_ns);
    }

    /// The same counts in log2 buckets.
    fn coarsen_to_log2(&mut self) {
        let mut l2 = vec![0u64; LOG2_BUCKETS as usize];
        for (b, &c) in self.buckets.iter().enumerate() {
            l2[self.layout.log2_bucket(b as u32) as usize] += c;
        }
        self.layout = Layout::Log2;
        self.buckets = l2;
    }

    /// Bucket `b`'s range: `[lo, hi)` ns, the last one up to the max.
    fn range(&self, b: usize) -> (u64, u64) {
        let (lo, hi) = self.layout.range(b as u32);
        if hi == u64::MAX {
            (lo, self.max.max(lo))
        } else {
            (lo, hi)
        }
    }

    /// The quantile `q` of the bucket that holds its rank (nearest rank, as
    /// `histogram::rank`), never above the exact maximum.
    ///
    /// Log-linear (16 buckets per power of two): the point `m` of the bucket's values
    /// `[lo, top]` (`top` its last nanosecond, or the maximum when that is lower) that is
    /// as far from both ends relatively, `m = 2·lo·top / (lo + top)`: within
    /// `(top - lo) / (top + lo)` of any value in it, at most 1/33 (3.0%) since a bucket is
    /// at most 1/16 of its lower bound wide; exact below 16 ns, and the top rank is the
    /// maximum. Log2 (older traces): as it
    /// always was, linear interpolation by the rank's place in its power-of-two bucket (so
    /// within a factor of two).
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = crate::histogram::rank(self.count, q);
        if rank == self.count && self.layout != Layout::Log2 {
            return self.max; // the top rank is the exact maximum
        }
        let mut before = 0u64;
        for (b, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if before + c >= rank {
                let (lo, hi) = self.range(b);
                if self.layout == Layout::Log2 {
                    let frac = (rank - before) as f64 / c as f64;
                    let v = lo as f64 + (hi - lo) as f64 * frac;
                    return (v as u64).min(self.max);
                }
                let top = hi.saturating_sub(1).max(lo).min(self.max.max(lo));
                if lo == 0 {
                    return 0;
                }
                let (l, t) = (lo as f64, top as f64);
                let m = 2.0 * l * t / (l + t);
                return (m.round() as u64).clamp(lo, top).min(self.max);
            }
            before += c;
        }
        self.max
    }

    /// The log2 view: a bin per power of two from the first non-empty one to the last (the
    /// last bucket of the layout, open-ended, makes its bin end at `u64::MAX`).
    pub(crate) fn log2_bins(&self) -> Vec<Log2Bin> {
        let mut l2 = [0u64; LOG2_BUCKETS as usize];
        let mut open = usize::MAX;
        for (b, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let k = self.layout.log2_bucket(b as u32) as usize;
            l2[k] += c;
            if self.layout.range(b as u32).1 == u64::MAX {
                open = k;
            }
        }
        let first = l2.iter().position(|&c| c > 0);
        let last = l2.iter().rposition(|&c| c > 0);
        let (Some(first), Some(last)) = (first, last) else {
            return Vec::new();
        };
        (first..=last)
            .map(|b| {
                let (low, high) = if b == 0 {
                    (0, 2)
                } else {
                    (1u64 << b, 1u64 << (b + 1))
                };
                Log2Bin {
                    low,
                    high: if b == open || b + 1 >= LOG2_BUCKETS as usize {
                        u64::MAX
                    } else {
                        high
                    },
                    count: l2[b],
                }
            })
            .collect()
    }
}

/// Exact durations kept for the rows whose calls were all kept as events: at most this many
/// in a report (8 bytes each), past which rows take their percentiles from the histograms.
const EXACT_CAP: usize = 1 << 23;

/// The nearest-rank quantile `q` of sorted `v`.
fn exact_quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[crate::histogram::rank(v.len() as u64, q) as usize - 1]
}

/// `ebsym latency --kind syscall|bio|runq`: every call, request or wait the kernel counted,
/// per syscall, per (device, op), or per process.
#[derive(Debug, Serialize)]
pub struct SystemLatencyReport {
    pub kind: String,
    pub rows: Vec<SystemLatencyRow>,
    pub totals: BTreeMap<String, u64>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The kernel histograms' buckets per power of two (the records' `sub_buckets`): 16
    /// (percentiles within 3%), or 0 for the log2 buckets of an older ebrec's trace
    /// (percentiles within their power of two).
    pub sub_buckets: u32,
}

/// One row: the fields of `ebsym latency`'s function rows (count, p50/p90/p99/max,
/// total), with the percentiles read from the kernel's buckets, or exact.
#[derive(Debug, Clone, Serialize)]
pub struct SystemLatencyRow {
    /// The syscall ("fsync"), the device and op ("vda write"), or the process
    /// ("db_bench [1234]").
    pub name: String,
    /// syscall: its number; bio: dev << 8 | op; runq: the pid.
    pub key: u64,
    pub count: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub total_ns: u64,
    /// The log2 histogram: [low, high) ns and count, from the first non-empty bucket to the
    /// last.
    pub histogram: Vec<Log2Bin>,
    /// Whether p50/p90/p99 are exact: every call the histogram counted is also an event
    /// (past the threshold, none lost), whose durations give them.
    pub exact: bool,
}

pub(crate) struct HistSink {
    family: EventFamily,
    by_key: BTreeMap<(u64, u32), KernelHist>,
    /// The events' durations by the same keys (until EXACT_CAP of them).
    events: BTreeMap<(u64, u32), Vec<u64>>,
    kept: usize,
}

impl Sink for HistSink {
    fn event(&mut self, ev: &Event<'_>) {
        // runq: per process generation; the others: over every process.
        let (key, d) = match ev {
            Event::Histogram(f, r) if *f == self.family => {
                let g = if *f == EventFamily::Runq {
                    r.generation
                } else {
                    0
                };
                self.by_key.entry((r.key, g)).or_default().add_row(r);
                return;
            }
            Event::Syscall(e) if self.family == EventFamily::Syscall => {
                ((u64::from(e.nr), 0), e.duration_ns)
            }
            Event::Bio(e) if self.family == EventFamily::Bio => {
                ((crate::event::bio_key(e.dev, e.op), 0), e.duration_ns)
            }
            Event::Runq(e) if self.family == EventFamily::Runq => {
                ((0, e.generation), e.duration_ns)
            }
            _ => return,
        };
        if self.kept < EXACT_CAP {
            self.kept += 1;
            self.events.entry(key).or_default().push(d);
        }
    }
}

/// `ebsym latency --kind syscall|bio|runq` of an open trace, rows by total time.
pub fn system_latency_from(
    trace: impl Trace,
    kind: EventKind,
    filter: &Filter,
    n: usize,
) -> SystemLatencyReport {
    let mut sink = HistSink::new(kind);
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    sink.report(&mut l, kind, filter, n)
}

impl HistSink {
    /// The rows of `kind`'s kernel histograms (syscall, bio, runq).
    pub(crate) fn new(kind: EventKind) -> Self {
        HistSink {
            family: kind.family(),
            by_key: BTreeMap::new(),
            events: BTreeMap::new(),
            kept: 0,
        }
    }

    /// `ebsym latency --kind syscall|bio|runq` of what the sink kept of the trace `l` was
    /// read into, rows by total time.
    pub(crate) fn report(
        self,
        l: &mut Loaded,
        kind: EventKind,
        filter: &Filter,
        n: usize,
    ) -> SystemLatencyReport {
        let mut sink = self;
        let notes = super::budget::notes(l, kind);
        l.losses.damage.extend(notes);
        l.losses.paced = super::budget::paced(l, kind);
        let arch = l.header.arch.clone();
        let capped = sink.kept >= EXACT_CAP;
        let sub_buckets = if sink.by_key.values().any(|h| h.layout == Layout::Log2) {
            0
        } else {
            Layout::LogLinear.sub_buckets()
        };
        let mut rows: Vec<SystemLatencyRow> = sink
            .by_key
            .iter()
            .map(|(&(key, g), h)| {
                // Exact when the events are every call the histogram counted.
                let exact = sink
                    .events
                    .get_mut(&(key, g))
                    .filter(|v| !capped && v.len() as u64 == h.count)
                    .map(|v| {
                        v.sort_unstable();
                        &*v
                    });
                let (name, key) = match kind {
                    EventKind::Syscall => (syscall_name(&arch, key), key),
                    EventKind::Bio => (bio_name(l, key), key),
                    _ => match l.tables.generations.get(&g) {
                        Some(gen) => (
                            format!(
                                "{} [{}]",
                                l.tables.string(gen.process.comm),
                                gen.process.pid
                            ),
                            u64::from(gen.process.pid),
                        ),
                        None => (format!("generation {g}"), 0),
                    },
                };
                SystemLatencyRow {
                    name,
                    key,
                    count: h.count,
                    max_ns: h.max,
                    p50_ns: exact.map_or_else(|| h.quantile(0.5), |v| exact_quantile(v, 0.5)),
                    p90_ns: exact.map_or_else(|| h.quantile(0.9), |v| exact_quantile(v, 0.9)),
                    p99_ns: exact.map_or_else(|| h.quantile(0.99), |v| exact_quantile(v, 0.99)),
                    total_ns: h.sum,
                    histogram: h.log2_bins(),
                    exact: exact.is_some(),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut totals = BTreeMap::new();
        totals.insert("count".to_string(), rows.iter().map(|r| r.count).sum());
        totals.insert(
            "total_ns".to_string(),
            rows.iter().map(|r| r.total_ns).sum(),
        );
        rows.truncate(n);
        let note = rows
            .is_empty()
            .then(|| empty_note(kind.name(), filter, &l.losses));
        SystemLatencyReport {
            kind: kind.name().into(),
            rows,
            totals,
            losses: l.losses.clone(),
            note,
            sub_buckets,
        }
    }
}

/// `ebsym tcp`: the targets' TCP connections grouped by remote endpoint.
#[derive(Debug, Serialize)]
pub struct TcpReport {
    pub rows: Vec<TcpRow>,
    pub connections: Vec<TcpConnectionRow>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Connections to (connect) or from (accept) one remote address.
#[derive(Debug, Clone, Serialize)]
pub struct TcpRow {
    /// "connect" (the target connected out) or "accept" (it accepted).
    pub role: &'static str,
    /// connect: the remote address and port; accept: the remote address and the local
    /// (listening) port it came in on, as "ADDR -> :PORT".
    pub remote: String,
    pub count: u64,
    /// Connects refused (a reset while SYN_SENT) or that never got established.
    pub failed: u64,
    /// Still open at the end of the recording.
    pub open: u64,
    pub lifetime_p50_ns: u64,
    pub lifetime_p90_ns: u64,
    pub lifetime_max_ns: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub retransmits: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
}

/// One connection.
#[derive(Debug, Clone, Serialize)]
pub struct TcpConnectionRow {
    pub id: u64,
    pub pid: u32,
    pub role: &'static str,
    pub local: String,
    pub remote: String,
    pub start_ns: u64,
    /// None: still open at the end.
    pub lifetime_ns: Option<u64>,
    pub established: bool,
    /// Payload bytes acknowledged by the peer and received (the kernel's bytes_acked and
    /// bytes_received at the close, less the SYN and FINs), 0 while open.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub retransmits: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
    /// The state changes: (ns since the start of the connection, "OLD->NEW").
    pub states: Vec<(u64, String)>,
}

#[derive(Default)]
pub(crate) struct TcpSink {
    conns: BTreeMap<u64, TcpConnectionRow>,
    local_ports: BTreeMap<u64, u32>,
    remote_ports: BTreeMap<u64, u32>,
    generations: BTreeMap<u64, u32>,
    closed: BTreeMap<u64, u64>,
    /// Per connection: (our FIN acknowledged, the peer's FIN received).
    fins: BTreeMap<u64, (bool, bool)>,
}

impl Sink for TcpSink {
    fn event(&mut self, ev: &Event<'_>) {
        let Event::Tcp(e) = ev else {
            return;
        };
        let c = self
            .conns
            .entry(e.conn)
            .or_insert_with(|| TcpConnectionRow {
                id: e.conn,
                pid: 0,
                role: "connect",
                local: String::new(),
                remote: String::new(),
                start_ns: 0,
                lifetime_ns: None,
                established: false,
                bytes_sent: 0,
                bytes_received: 0,
                retransmits: 0,
                resets_sent: 0,
                resets_received: 0,
                states: Vec::new(),
            });
        self.generations.entry(e.conn).or_insert(e.generation);
        if e.local_port != 0 {
            self.local_ports.insert(e.conn, e.local_port);
        }
        if e.remote_port != 0 {
            self.remote_ports.insert(e.conn, e.remote_port);
        }
        c.retransmits = c.retransmits.max(u64::from(e.retransmits));
        match e.kind {
            TcpEventKind::Accept => c.role = "accept",
            TcpEventKind::Connect => c.role = "connect",
            TcpEventKind::Retransmit => {}
            TcpEventKind::SendReset => c.resets_sent += 1,
            TcpEventKind::ReceiveReset => c.resets_received += 1,
            TcpEventKind::State => {
                c.states.push((
                    e.time_ns,
                    format!(
                        "{}->{}",
                        tcp_state_name(e.old_state),
                        tcp_state_name(e.state)
                    ),
                ));
                if e.state == 1 {
                    c.established = true;
                }
                // Which FINs the connection exchanged, to take them off the kernel's
                // counters (bytes_acked counts the SYN and our FIN, bytes_received the
                // peer's FIN: each takes a sequence number).
                let fins = self.fins.entry(e.conn).or_default();
                match (e.old_state, e.state) {
                    // Ours acknowledged: FIN_WAIT2, or a LAST_ACK/CLOSING that ended.
                    (_, 5) | (9, 7) | (11, 7) => fins.0 = true,
                    _ => {}
                }
                match (e.old_state, e.state) {
                    // The peer's received: CLOSE_WAIT, CLOSING, TIME_WAIT, or FIN_WAIT2
                    // ending (the kernel moves it to a time-wait socket on the FIN).
                    (_, 8) | (_, 11) | (_, 6) | (5, 7) => fins.1 = true,
                    _ => {}
                }
                if e.state == 7 {
                    let (ours, peers) = *fins;
                    // An accepted socket is made after its SYN-ACK is acknowledged: only a
                    // connect's counter holds its SYN.
                    let syn = u64::from(c.established && c.role == "connect");
                    c.bytes_sent = e.bytes_sent.saturating_sub(syn + u64::from(ours));
                    c.bytes_received = e.bytes_received.saturating_sub(u64::from(peers));
                    self.closed.insert(e.conn, e.time_ns);
                }
            }
            TcpEventKind::Unspecified => {}
        }
        if e.kind == TcpEventKind::Accept {
            // An accepted connection was established before the accept returned.
            c.established = true;
        }
    }
}

fn endpoint(addr: &[u8], port: u32) -> String {
    let ip = match addr.len() {
        4 => std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string(),
        16 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(addr);
            format!("[{}]", std::net::Ipv6Addr::from(b))
        }
        _ => "?".to_string(),
    };
    format!("{ip}:{port}")
}

fn addr_only(addr: &[u8]) -> String {
    let e = endpoint(addr, 0);
    e.strip_suffix(":0").unwrap_or(&e).to_string()
}

/// `ebsym tcp` of an open trace.
pub fn tcp_from(trace: impl Trace, filter: &Filter) -> TcpReport {
    let mut sink = TcpSink::default();
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    sink.report(&mut l, filter)
}

impl TcpSink {
    /// `ebsym tcp` of what the sink kept of the trace `l` was read into.
    pub(crate) fn report(self, l: &mut Loaded, filter: &Filter) -> TcpReport {
        let mut sink = self;
        let notes = super::budget::notes(l, EventKind::Tcp);
        l.losses.damage.extend(notes);
        let mut groups: BTreeMap<(&'static str, String), (TcpRow, Vec<u64>)> = BTreeMap::new();
        let mut connections = Vec::new();
        for (id, mut c) in std::mem::take(&mut sink.conns) {
            let rec = l.tcp_connections.get(&id);
            let (laddr, raddr) = rec.map_or((&[][..], &[][..]), |r| {
                (&r.local_addr[..], &r.remote_addr[..])
            });
            let lport = sink
                .local_ports
                .get(&id)
                .copied()
                .or(rec.map(|r| r.local_port))
                .unwrap_or(0);
            let rport = sink
                .remote_ports
                .get(&id)
                .copied()
                .or(rec.map(|r| r.remote_port))
                .unwrap_or(0);
            c.local = endpoint(laddr, lport);
            c.remote = endpoint(raddr, rport);
            c.start_ns = rec.map_or(0, |r| r.start_ns);
            if c.start_ns == 0 {
                c.start_ns = c.states.first().map_or(0, |s| s.0);
            }
            c.pid = sink
                .generations
                .get(&id)
                .and_then(|g| l.tables.generations.get(g))
                .map_or(0, |g| g.process.pid);
            c.lifetime_ns = sink.closed.get(&id).map(|&t| t.saturating_sub(c.start_ns));
            let start = c.start_ns;
            for s in &mut c.states {
                s.0 = s.0.saturating_sub(start);
            }
            let key = if c.role == "accept" {
                format!("{} -> :{lport}", addr_only(raddr))
            } else {
                c.remote.clone()
            };
            let (row, lifetimes) = groups.entry((c.role, key.clone())).or_insert_with(|| {
                (
                    TcpRow {
                        role: c.role,
                        remote: key,
                        count: 0,
                        failed: 0,
                        open: 0,
                        lifetime_p50_ns: 0,
                        lifetime_p90_ns: 0,
                        lifetime_max_ns: 0,
                        bytes_sent: 0,
                        bytes_received: 0,
                        retransmits: 0,
                        resets_sent: 0,
                        resets_received: 0,
                    },
                    Vec::new(),
                )
            });
            row.count += 1;
            if !c.established && c.lifetime_ns.is_some() {
                row.failed += 1;
            }
            match c.lifetime_ns {
                Some(t) if c.established => lifetimes.push(t),
                Some(_) => {}
                None => row.open += 1,
            }
            row.bytes_sent += c.bytes_sent;
            row.bytes_received += c.bytes_received;
            row.retransmits += c.retransmits;
            row.resets_sent += c.resets_sent;
            row.resets_received += c.resets_received;
            connections.push(c);
        }
        let mut rows: Vec<TcpRow> = groups
            .into_values()
            .map(|(mut row, mut lt)| {
                lt.sort_unstable();
                let q = |q: f64| {
                    if lt.is_empty() {
                        0
                    } else {
                        lt[crate::histogram::rank(lt.len() as u64, q) as usize - 1]
                    }
                };
                row.lifetime_p50_ns = q(0.5);
                row.lifetime_p90_ns = q(0.9);
                row.lifetime_max_ns = lt.last().copied().unwrap_or(0);
                row
            })
            .collect();
        rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.remote.cmp(&b.remote)));
        let note = rows
            .is_empty()
            .then(|| empty_note(EventKind::Tcp.name(), filter, &l.losses));
        TcpReport {
            rows,
            connections,
            losses: l.losses.clone(),
            note,
        }
    }
}

/// The heat map's points of one kind while the trace streams by (see [`heat_points`]).
pub(crate) struct PointSink {
    kind: EventKind,
    hist: Vec<HeatPoint>,
    exact: Vec<HeatPoint>,
}
impl Sink for PointSink {
    fn event(&mut self, ev: &Event<'_>) {
        let exact = |t: u64, d: u64| HeatPoint {
            time_ns: t,
            span_ns: 0,
            lo_ns: d,
            hi_ns: d,
            count: 1,
        };
        let p = match (self.kind, ev) {
            (k, Event::Histogram(f, r)) if k.family() == *f => {
                // A point per power of two (the heat map's rows): log-linear buckets
                // summed into theirs.
                let span = r.time_ns.saturating_sub(r.since_ns);
                let mut l2 = [0u64; LOG2_BUCKETS as usize];
                for &(b, c) in &r.buckets {
                    l2[r.layout.log2_bucket(b) as usize] += c;
                }
                for (b, &c) in l2.iter().enumerate().filter(|(_, &c)| c > 0) {
                    let lo = if b == 0 { 0 } else { 1u64 << b };
                    self.hist.push(HeatPoint {
                        time_ns: r.time_ns,
                        span_ns: span,
                        lo_ns: lo,
                        hi_ns: lo.saturating_mul(2).max(2),
                        count: c,
                    });
                }
                return;
            }
            // An interval of the kind: its duration (lock: the wait) at its start.
            _ if ev.kind() != Some(self.kind) => return,
            _ => match ev.view() {
                Some(v) if v.kind == self.kind => match v.duration_ns {
                    Some(d) => exact(v.time_ns, d),
                    None => return,
                },
                _ => return,
            },
        };
        self.exact.push(p);
    }
}

impl PointSink {
    pub(crate) fn new(kind: EventKind) -> Self {
        PointSink {
            kind,
            hist: Vec::new(),
            exact: Vec::new(),
        }
    }

    /// The kernel's histograms' points if the trace had any of the kind, else the
    /// events'.
    pub(crate) fn points(self) -> Vec<HeatPoint> {
        if self.hist.is_empty() {
            self.exact
        } else {
            self.hist
        }
    }
}

/// The heat map's points of `kind`: for syscall, bio and runq the kernel's histograms
/// (every call, request or wait; each row spread over its interval), else (or when the
/// trace has no histograms) one point per event at its start.
pub fn heat_points(
    trace: impl Trace,
    kind: EventKind,
    filter: &Filter,
) -> (Loaded, Vec<HeatPoint>) {
    let mut sink = PointSink::new(kind);
    let l = Loaded::from_trace(trace, filter, &mut sink);
    (l, sink.points())
}

impl SystemLatencyReport {
    /// The report for people: a row per syscall (device and op, process) with its log2
    /// histogram; "exact" after a row whose percentiles come from its events.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let what = match self.kind.as_str() {
            "syscall" => "system calls",
            "bio" => "block I/O requests",
            _ => "run-queue waits",
        };
        let accuracy = if self.sub_buckets == 0 {
            "the kernel's log2 histograms; percentiles within their power-of-two bucket"
        } else {
            "the kernel's histograms; percentiles within 3%, exact where every call is an event"
        };
        let _ = writeln!(
            s,
            "{what} (every one, from {accuracy}): count {}, total {}",
            self.totals.get("count").copied().unwrap_or(0),
            human_ns(self.totals.get("total_ns").copied().unwrap_or(0))
        );
        if let Some(note) = &self.note {
            let _ = writeln!(s, "{note}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} {}  count {}  p50 {}  p90 {}  p99 {}  max {}  total {}{}",
                i + 1,
                r.name,
                r.count,
                human_ns(r.p50_ns),
                human_ns(r.p90_ns),
                human_ns(r.p99_ns),
                human_ns(r.max_ns),
                human_ns(r.total_ns),
                if r.exact { "  exact" } else { "" }
            );
            s.push_str(&log2_text(&r.histogram));
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

impl TcpReport {
    /// The report for people: a row per remote endpoint.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let n: u64 = self.rows.iter().map(|r| r.count).sum();
        let _ = writeln!(s, "tcp connections: {n}");
        if let Some(note) = &self.note {
            let _ = writeln!(s, "{note}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} {} {}  count {}  failed {}  open {}  lifetime p50 {}  p90 {}  max {}",
                i + 1,
                r.role,
                r.remote,
                r.count,
                r.failed,
                r.open,
                human_ns(r.lifetime_p50_ns),
                human_ns(r.lifetime_p90_ns),
                human_ns(r.lifetime_max_ns)
            );
            let _ = writeln!(
                s,
                "    bytes sent {}  received {}  retransmits {}  resets sent {}  received {}",
                r.bytes_sent, r.bytes_received, r.retransmits, r.resets_sent, r.resets_received
            );
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A histogram of `values` as the kernel would count them in `layout`, in one row.
    fn hist_in(layout: Layout, values: &[u64]) -> KernelHist {
        let mut counts = BTreeMap::new();
        for &v in values {
            *counts.entry(layout.bucket_of(v)).or_insert(0u64) += 1;
        }
        let mut h = KernelHist::default();
        h.add_row(&HistogramRow {
            count: values.len() as u64,
            sum_ns: values.iter().sum(),
            max_ns: values.iter().copied().max().unwrap_or(0),
            buckets: counts.into_iter().collect(),
            layout,
            ..Default::default()
        });
        h
    }

    fn hist(values: &[u64]) -> KernelHist {
        hist_in(Layout::Log2, values)
    }

    /// The exact nearest-rank quantile.
    fn truth(values: &[u64], q: f64) -> u64 {
        let mut v = values.to_vec();
        v.sort_unstable();
        exact_quantile(&v, q)
    }

    #[test]
    fn quantiles_stay_in_their_log2_bucket() {
        // An older ebrec's trace (log2 buckets) gives the answers it always gave.
        // 90 fast calls of ~1 µs and 10 of 5 ms: p50 in [512 ns, 1024 ns), p99 in the
        // bucket of 5 ms, [4.19 ms, 8.39 ms), and never above the maximum.
        let mut v = vec![800u64; 90];
        v.extend([5_000_000u64; 10]);
        let h = hist(&v);
        let p50 = h.quantile(0.5);
        assert!((512..1024).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((1 << 22..=5_000_000).contains(&p99), "{p99}");
        assert_eq!(h.quantile(1.0), 5_000_000);
        assert_eq!(hist(&[]).quantile(0.5), 0);
        // Interpolated by the rank's place in its bucket: 512 + 512 * 50/90, the top of
        // [512, 1024) for p90, the max for p99.
        assert_eq!(
            (h.quantile(0.5), h.quantile(0.9), h.quantile(0.99)),
            (796, 1024, 5_000_000)
        );
        let bins = h.log2_bins();
        assert_eq!(bins.first().map(|b| (b.low, b.count)), Some((512, 90)));
        assert_eq!(bins.last().map(|b| (b.low, b.count)), Some((1 << 22, 10)));
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 100);
        // 100 naps of 5.06 ms and one of 7 ms: the whole bucket [4.19 ms, 8.39 ms)
        // interpolated, p50 6.29 ms (up to the max, 7 ms, for p90).
        let mut naps = vec![5_060_000u64; 99];
        naps.push(7_000_000);
        let h = hist(&naps);
        assert_eq!(h.quantile(0.5), 6_291_456);
        assert_eq!(h.quantile(0.9), 7_000_000);
        // The last log2 bucket is open-ended.
        assert_eq!(hist(&[1 << 41]).log2_bins()[0].high, u64::MAX);
    }

    /// Deterministic pseudo-random numbers in [0, 1).
    fn uniform(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn log_linear_quantiles_are_within_3_percent() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut sets: Vec<(&str, Vec<u64>)> = Vec::new();
        // Spread over six decades (log-uniform), 1 µs to 1 s.
        let spread = (0..20_000)
            .map(|_| (1e3 * 1e6f64.powf(uniform(&mut seed))) as u64)
            .collect();
        sets.push(("log-uniform", spread));
        // Uniform over one octave and a bit.
        let flat = (0..5_000)
            .map(|_| 3_000_000 + (uniform(&mut seed) * 4e6) as u64)
            .collect();
        sets.push(("uniform", flat));
        // Tight clusters: 100 naps of ~5.06 ms; values at a bucket's low and high edges
        // (the worst places for a point estimate); fast calls in the exact range.
        let naps = (0..100)
            .map(|_| 5_055_000 + (uniform(&mut seed) * 120_000.0) as u64)
            .collect();
        sets.push(("naps", naps));
        sets.push(("low edge", vec![1 << 22; 50]));
        sets.push(("high edge", vec![(17 << 18) - 1; 50]));
        sets.push(("tiny", (0..200).map(|i| i % 16).collect()));
        // Bimodal: fast calls and a slow tail.
        let mut bi: Vec<u64> = (0..9_000)
            .map(|_| 800 + (uniform(&mut seed) * 400.0) as u64)
            .collect();
        bi.extend((0..1_000).map(|_| 2_000_000 + (uniform(&mut seed) * 8e6) as u64));
        sets.push(("bimodal", bi));
        for (name, v) in &sets {
            let h = hist_in(Layout::LogLinear, v);
            for q in [0.5, 0.9, 0.99] {
                let (got, want) = (h.quantile(q), truth(v, q));
                let err = (got as f64 - want as f64).abs() / want.max(1) as f64;
                assert!(
                    err <= 1.0 / 33.0,
                    "{name} q{q}: {got} vs {want} ({:.2}%)",
                    err * 100.0
                );
            }
            assert_eq!(h.quantile(1.0), h.max, "{name}");
            let n: u64 = h.log2_bins().iter().map(|b| b.count).sum();
            assert_eq!(n, v.len() as u64, "{name}");
        }
        // Exact below 16 ns; the max caps the open-ended last bucket.
        assert_eq!(hist_in(Layout::LogLinear, &[7; 10]).quantile(0.5), 7);
        let h = hist_in(Layout::LogLinear, &[100_000_000_000; 3]);
        assert_eq!(h.quantile(0.99), 100_000_000_000);
        assert_eq!(h.log2_bins()[0].high, u64::MAX);
    }

    #[test]
    fn log_linear_rows_sum_into_the_same_log2_bins() {
        let v: Vec<u64> = vec![800, 900, 1500, 5_060_000, 5_100_000, 9_000_000];
        let (fine, old) = (hist_in(Layout::LogLinear, &v), hist(&v));
        assert_eq!(fine.log2_bins(), old.log2_bins());
        // Rows of both layouts under one key: the log2 view of all.
        let mut both = hist(&v);
        both.add_row(&HistogramRow {
            count: 1,
            sum_ns: 5_060_000,
            max_ns: 5_060_000,
            buckets: vec![(Layout::LogLinear.bucket_of(5_060_000), 1)],
            layout: Layout::LogLinear,
            ..Default::default()
        });
        assert_eq!((both.layout, both.count), (Layout::Log2, 7));
        let bins = both.log2_bins();
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 7);
        let in_5ms = bins.iter().find(|b| b.low == 1 << 22).map(|b| b.count);
        assert_eq!(in_5ms, Some(3));
    }

    /// A trace of nanosleep (35) calls, the first `events` of them events as well, and
    /// getppid (110) calls in the histogram only.
    fn syscall_trace(naps: &[u64], events: usize) -> Vec<u8> {
        use ebtrace_format::events::SyscallEvent;
        use ebtrace_format::proto::{record::Kind, Header, LatencyHistogram, Record};
        let header = Header {
            arch: "x86_64".into(),
            ..Default::default()
        };
        let opts = ebtrace_format::WriterOptions::default();
        let mut w = ebtrace_format::TraceWriter::new(Vec::new(), header, opts).unwrap();
        for (i, &d) in naps.iter().take(events).enumerate() {
            w.syscall(&SyscallEvent {
                time_ns: 1_000 + i as u64 * 10_000_000,
                generation: 1,
                tid: 7,
                stack: 0,
                nr: 35,
                duration_ns: d,
                ret: 0,
                weight_ns: 0,
            })
            .unwrap();
        }
        let l = Layout::LogLinear;
        let mut h = LatencyHistogram {
            time_ns: 2_000_000_000,
            since_ns: 0,
            family: EventFamily::Syscall as i32,
            sub_buckets: l.sub_buckets(),
            ..Default::default()
        };
        for (nr, values) in [(35u64, naps.to_vec()), (110, vec![300u64; 1000])] {
            let mut counts = BTreeMap::new();
            for &v in &values {
                *counts.entry(l.bucket_of(v)).or_insert(0u64) += 1;
            }
            h.generation.push(1);
            h.key.push(nr);
            h.count.push(values.len() as u64);
            h.sum_ns.push(values.iter().sum());
            h.max_ns.push(values.iter().copied().max().unwrap());
            h.nbuckets.push(counts.len() as u32);
            for (b, c) in counts {
                h.bucket.push(b);
                h.bucket_count.push(c);
            }
        }
        let rec = Record {
            kind: Some(Kind::Histogram(h)),
        };
        w.write_record(&rec).unwrap();
        w.finish(None).unwrap()
    }

    #[test]
    fn rows_whose_calls_are_all_events_have_exact_percentiles() {
        let naps: Vec<u64> = (0..100).map(|i| 5_050_000 + i * 7_000).collect();
        let report = |events| {
            let bytes = syscall_trace(&naps, events);
            let r = ebtrace_format::TraceReader::new(&bytes[..]).unwrap();
            system_latency_from(r, EventKind::Syscall, &Filter::default(), 10)
        };
        let row = |rep: &SystemLatencyReport, n: &str| {
            rep.rows.iter().find(|r| r.name == n).unwrap().clone()
        };
        let rep = report(100);
        assert_eq!(rep.sub_buckets, 16);
        let ns = row(&rep, "nanosleep");
        assert!(ns.exact, "{ns:?}");
        assert_eq!(
            (ns.p50_ns, ns.p90_ns, ns.p99_ns),
            (truth(&naps, 0.5), truth(&naps, 0.9), truth(&naps, 0.99))
        );
        let fast = row(&rep, "getppid");
        assert!(!fast.exact);
        assert!(fast.p50_ns.abs_diff(300) * 33 <= 300, "{fast:?}");
        assert_eq!(fast.max_ns, 300);
        assert!(rep.to_text().contains("  exact\n"), "{}", rep.to_text());
        // One event short (lost, or under the threshold): from the histogram, within 3%.
        let ns = row(&report(99), "nanosleep");
        assert!(!ns.exact);
        for (got, q) in [(ns.p50_ns, 0.5), (ns.p90_ns, 0.9), (ns.p99_ns, 0.99)] {
            let want = truth(&naps, q);
            assert!(got.abs_diff(want) * 33 <= want, "q{q}: {got} vs {want}");
        }
    }

    #[test]
    fn endpoints() {
        assert_eq!(endpoint(&[127, 0, 0, 1], 80), "127.0.0.1:80");
        assert_eq!(addr_only(&[10, 0, 0, 2]), "10.0.0.2");
    }
}
