//! A window's profiles: one pprof profile per kind of event in the window (cpu, offcpu,
//! lock, alloc, …), built by analyze from the trace file, its samples labelled with their
//! process (`pid`, `comm`, and `container`/`cgroup` when the trace has them).
//!
//! analyze's [`Stacks`](ebtrace_analyze::reports::Stacks) merge stacks across processes,
//! so a profile is made of parts: the stacks of one process each (analyze's `Filter` by
//! pid), the busiest [`MAX_SPLIT`] processes of the kind on their own and the others
//! together in one part (labelled `comm="(N other processes)"`), all over the records
//! decoded once.
//!
//! Unsymbolized (the default), user frames are addresses in mappings with build-ids (the
//! backend symbolizes, as Parca does), kernel frames keep their kallsyms names. With
//! `symbolize`, the window is symbolized in memory first, as ebsym does, with the
//! symbolizer library (loaded only then). With `symbols_only` (what Pyroscope, which does
//! not symbolize native frames, is sent by default), user frames are named from the
//! host's binaries' ELF symbol tables (`.symtab`/`.dynsym`, no DWARF), each Location
//! keeping its address and mapping (build-id) for a backend that can do better.
use anyhow::{Context, Result};
use ebtrace_analyze::model::{Event, Filter, Loaded, Records, Sink};
use ebtrace_analyze::pprof::{self, Part};
use ebtrace_analyze::reports::{stacks_by_thread_from, EventKind};
use ebtrace_format::proto::Record;
use ebtrace_format::TraceReader;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Processes of a kind that get a part of their own; the rest share one.
pub const MAX_SPLIT: usize = 32;

/// How a window is turned into profiles.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Symbolize in memory before building the profiles.
    pub symbolize: bool,
    /// Debug files for `symbolize` (as ebsym's --debug-dir).
    pub debug_dirs: Vec<PathBuf>,
    /// Without `symbolize`: name user frames from the binaries' ELF symbol tables only.
    pub symbols_only: bool,
}

/// The profile of one kind in a window.
#[derive(Debug)]
pub struct KindProfile {
    pub kind: EventKind,
    pub profile: ebtrace_proto::pprof::Profile,
    /// `profile` gzip-compressed, as the backends take it (filled in by the pusher, once
    /// the profile has the window's times).
    pub gz: Vec<u8>,
}

/// What a window holds besides its profiles: from its header.
#[derive(Debug, Clone, Default)]
pub struct WindowInfo {
    pub hostname: String,
    pub kernel_release: String,
    /// Sampling frequency of --cpu (Hz), 0 when unknown.
    pub cpu_hz: u64,
    /// The comm of the process with the most events (a default service name).
    pub top_comm: String,
    /// Whether user frames carry names (symbolized) or addresses only.
    pub symbolized: bool,
}

/// Events per (kind, generation), the survey of a window.
#[derive(Default)]
struct Survey {
    counts: HashMap<(EventKind, u32), u64>,
}

/// The kind of profile an event goes to: its view's kind (tcp: the connects and accepts,
/// the events with a stack), or an --aggregate row's family's.
fn event_kind(ev: &Event<'_>) -> Option<EventKind> {
    match ev.view() {
        Some(v) => (v.kind != EventKind::Tcp || v.stack != 0).then_some(v.kind),
        None => match ev {
            Event::Aggregated(family, _) => EventKind::of_family(*family),
            _ => None,
        },
    }
}

impl Sink for Survey {
    fn event(&mut self, ev: &Event<'_>) {
        if let Some(k) = event_kind(ev) {
            let generation = ev.time_generation_tid().1;
            *self.counts.entry((k, generation)).or_default() += 1;
        }
    }
}

/// The records of the window at `path`, symbolized in memory first with `symbolize`.
fn records(path: &Path, options: &Options) -> Result<Vec<Record>> {
    let symbolized = || ebtrace_symbolize::trace::is_symbolized(path).unwrap_or(false);
    if (options.symbolize || options.symbols_only) && !symbolized() {
        let mut o = ebtrace_symbolize::Options {
            symbols_only: !options.symbolize,
            ..Default::default()
        };
        o.locator.debug_dirs = options.debug_dirs.clone();
        let urls = ebtrace_symbolize::debuginfod::urls_from_env();
        if options.symbolize && !urls.is_empty() {
            use ebtrace_symbolize::debuginfod::{Client, Config};
            o.locator.debuginfod = Some(std::sync::Arc::new(Client::new(Config::new(urls))));
        }
        let (_, bytes) = ebtrace_symbolize::trace::symbolize_trace_to_vec(
            path,
            &o,
            &ebtrace_symbolize::progress::NoProgress,
        )
        .with_context(|| format!("cannot symbolize {}", path.display()))?;
        let r = TraceReader::new(&bytes[..])?;
        return Ok(r.collect());
    }
    let r = TraceReader::open(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(r.collect())
}

/// Per process: pid, its labels, events.
struct Proc {
    pid: u32,
    labels: Vec<(String, String)>,
}

/// The profiles of the window at `path`, one per kind with events in it (none when the
/// window has no events).
pub fn window_profiles(path: &Path, options: &Options) -> Result<(WindowInfo, Vec<KindProfile>)> {
    let records = records(path, options)?;
    let mut survey = Survey::default();
    let l = Loaded::from_trace(
        Records(records.iter().cloned()),
        &Filter::default(),
        &mut survey,
    );
    let mut info = WindowInfo {
        hostname: l.header.hostname.clone(),
        kernel_release: l.header.kernel_release.clone(),
        cpu_hz: l
            .header
            .options
            .iter()
            .find(|o| o.key == "cpu")
            .and_then(|o| o.value.parse().ok())
            .unwrap_or(0),
        symbolized: l.losses.symbolized,
        ..Default::default()
    };
    // Per pid: the labels of its generation with the most events.
    let mut per_pid_generation: HashMap<u32, (u64, u32)> = HashMap::new();
    let mut by_kind: BTreeMap<EventKind, HashMap<u32, u64>> = BTreeMap::new();
    for (&(kind, generation), &n) in &survey.counts {
        let pid = l.pid(generation);
        *by_kind.entry(kind).or_default().entry(pid).or_default() += n;
        let e = per_pid_generation.entry(pid).or_insert((0, generation));
        if n > e.0 {
            *e = (n, generation);
        }
    }
    let procs: HashMap<u32, Proc> = per_pid_generation
        .iter()
        .map(|(&pid, &(_, generation))| {
            let mut labels = vec![("pid".to_string(), pid.to_string())];
            if let Some(g) = l.tables.generations.get(&generation) {
                let p = &g.process;
                labels.push(("comm".into(), l.tables.string(p.comm).into_owned()));
                if !p.container_id.is_empty() {
                    labels.push(("container".into(), p.container_id.clone()));
                }
                if p.cgroup != 0 {
                    let cg = l.tables.string(p.cgroup);
                    if !cg.is_empty() {
                        labels.push(("cgroup".into(), cg.into_owned()));
                    }
                }
            }
            (pid, Proc { pid, labels })
        })
        .collect();
    let mut events_per_pid: HashMap<u32, u64> = HashMap::new();
    for m in by_kind.values() {
        for (&pid, &n) in m {
            *events_per_pid.entry(pid).or_default() += n;
        }
    }
    if let Some((&pid, _)) = events_per_pid
        .iter()
        .max_by_key(|(pid, n)| (**n, u32::MAX - **pid))
    {
        if let Some(c) = procs[&pid].labels.iter().find(|(k, _)| k == "comm") {
            info.top_comm = c.1.clone();
        }
    }
    let mut out = Vec::new();
    for (kind, pids) in by_kind {
        let mut pids: Vec<(u32, u64)> = pids.into_iter().collect();
        pids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let rest: Vec<u32> = pids.iter().skip(MAX_SPLIT).map(|p| p.0).collect();
        let mut filters: Vec<(Filter, Vec<(String, String)>)> = pids
            .iter()
            .take(MAX_SPLIT)
            .map(|&(pid, _)| {
                (
                    Filter {
                        pids: vec![procs[&pid].pid],
                        ..Default::default()
                    },
                    procs[&pid].labels.clone(),
                )
            })
            .collect();
        if !rest.is_empty() {
            let labels = vec![(
                "comm".to_string(),
                format!("({} other processes)", rest.len()),
            )];
            filters.push((
                Filter {
                    pids: rest,
                    ..Default::default()
                },
                labels,
            ));
        }
        let stacks: Vec<(ebtrace_analyze::reports::Stacks, Vec<(String, String)>)> = filters
            .into_iter()
            .map(|(f, labels)| {
                (
                    stacks_by_thread_from(Records(records.iter().cloned()), kind, &f),
                    labels,
                )
            })
            .filter(|(s, _)| !s.stacks.is_empty())
            .collect();
        if stacks.is_empty() {
            continue;
        }
        let parts: Vec<Part<'_>> = stacks
            .iter()
            .map(|(s, labels)| Part {
                stacks: s,
                labels: labels.clone(),
            })
            .collect();
        let profile = pprof::profile_of_parts(
            &parts,
            kind.default_measure(),
            &pprof::Options {
                addresses_only: !info.symbolized,
                unresolved_as_addresses: true,
            },
        );
        out.push(KindProfile {
            kind,
            profile,
            gz: Vec::new(),
        });
    }
    Ok((info, out))
}
