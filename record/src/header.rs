//! The trace header of a recording (also each rotated file's and each agent window's).
use crate::config::{AllocSampler, RecordConfig};
use crate::procfs;
use ebtrace_format::proto::{Header, KeyValue};

/// The trace header of a recording: host, kernel, clocks, command line and every option that
/// changes what the trace holds.
pub fn header(a: &RecordConfig) -> Header {
    let (host, release, arch) = procfs::uname();
    let mut options = Vec::new();
    let mut opt = |k: &str, v: String| {
        options.push(KeyValue {
            key: k.into(),
            value: v,
        })
    };
    if let Some(m) = a.alloc {
        opt("alloc", m.to_string());
        opt(
            "alloc-sampler",
            format!("{:?}", a.alloc_sampler).to_lowercase(),
        );
        if let Some(n) = a.preload_period().or(a.sample_bytes) {
            opt("sample-bytes", n.to_string());
        }
        opt("sample", a.sample.to_string());
        if a.alloc_sampler == AllocSampler::Uprobe {
            opt(
                "alloc-probes",
                if crate::config::use_sessions(a.alloc_probes) {
                    "session"
                } else {
                    "classic"
                }
                .into(),
            );
        }
        if a.no_free {
            opt("no-free", "true".into());
        }
        // In order: allocator N of the events is the Nth; its NAME (what the reports call
        // it) beside the spec, so that a reader need not parse specs.
        for f in &a.alloc_fn {
            opt("alloc-fn", f.clone());
            let name = f
                .parse::<crate::funcs::allocfn::AllocFnSpec>()
                .map_or_else(|_| f.clone(), |s| s.name);
            opt("alloc-fn-name", name);
        }
    }
    if let Some(m) = a.lock {
        opt("lock", m.to_string());
        opt("lock-mode", format!("{:?}", a.lock_mode).to_lowercase());
    }
    if let Some(hz) = a.cpu {
        opt("cpu", hz.to_string());
    }
    if let Some(us) = a.offcpu {
        opt("offcpu", us.to_string());
        opt("offcpu-sample", a.offcpu_sample.to_string());
        opt("offcpu-rate", a.offcpu_rate.to_string());
    }
    if a.memgrowth {
        opt("memgrowth", "true".into());
        opt("memgrowth-sample", a.memgrowth_sample.to_string());
    }
    if let Some(us) = a.syscalls {
        opt("syscalls", us.to_string());
        opt("syscalls-sample", a.syscalls_sample.to_string());
        opt("syscalls-rate", a.syscalls_rate.to_string());
    }
    if let Some(us) = a.bio {
        opt("bio", us.to_string());
    }
    if let Some(us) = a.runq {
        opt("runq", us.to_string());
        opt("runq-sample", a.runq_sample.to_string());
        opt("runq-rate", a.runq_rate.to_string());
    }
    if a.tcp {
        opt("tcp", "true".into());
    }
    if a.bpf_stats {
        opt("bpf-stats", "true".into());
    }
    if let Some(n) = a.max_events_per_sec {
        opt("max-events-per-sec", n.to_string());
    }
    if let Some(p) = a.max_cpu {
        opt("max-cpu", p.to_string());
    }
    if let Some(n) = a.max_size {
        opt("max-size", n.to_string());
    }
    if let Some(n) = a.rotate {
        opt("rotate", n.to_string());
    }
    probe_options(a, &mut opt);
    opt("sched", crate::sched::name(a.sched).into());
    for l in &a.alloc_lib {
        opt("alloc-lib", l.display().to_string());
    }
    opt("stack-mode", a.stack_mode.to_string());
    if a.uses_cfi_tables() {
        opt("cfi-memory", a.cfi_memory.to_string());
    }
    if a.no_unwind_info {
        opt("no-unwind-info", "true".into());
    }
    opt("stack-depth", a.stack_depth.to_string());
    opt("ringbuf-size", crate::config::ringbuf_bytes(a).to_string());
    if a.all {
        opt("all", "true".into());
    }
    Header {
        format_version: 0,
        recorder_version: format!("ebrec {}", env!("CARGO_PKG_VERSION")),
        hostname: host,
        kernel_release: release,
        arch,
        page_size: procfs::page_size() as u32,
        cpu_count: procfs::possible_cpus().unwrap_or(1) as u32,
        boot_id: procfs::boot_id(),
        clock: "boottime".into(),
        options,
        argv: std::env::args().collect(),
        start_time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
        start_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        clock_ticks_per_sec: procfs::clock_ticks() as u32,
    }
}

/// The header options of the probes the user named: --func, --usdt and their companions,
/// --exceptions, --request, --args, --clone-args.
fn probe_options(a: &RecordConfig, opt: &mut impl FnMut(&str, String)) {
    for f in &a.func {
        opt("func", f.clone());
    }
    for u in &a.usdt {
        opt("usdt", u.clone());
    }
    if a.usdt_stack {
        opt("usdt-stack", "true".into());
    }
    // the target's memory in the trace: said where every reader of the header sees it
    for u in &a.usdt_string {
        opt("usdt-string", u.clone());
    }
    if !a.usdt_string.is_empty() {
        opt("usdt-string-bytes", a.usdt_string_bytes.to_string());
    }
    if a.exceptions {
        opt("exceptions", "true".into());
    }
    if a.offcpu.is_some() && a.offcpu_wakers == Some(false) && a.request.is_none() {
        // no wake hook: no waker in any off-CPU event (not "woken by an interrupt")
        opt("offcpu-wakers", "off".into());
    }
    if let Some(r) = &a.request {
        opt("request", r.clone());
        if a.offcpu.is_some() {
            // inside a request, blocks under the threshold are a time-weighted sample, its
            // unit the larger of the threshold and --offcpu-sample's
            opt("offcpu-request-sample", "max(offcpu,offcpu-sample)".into());
            // the slow requests' blocks kept whole (the adaptive threshold's values are
            // ProbeChange records, setting request-slow-ns)
            opt("request-slow", a.request_slow.to_string());
        }
    }
    for u in &a.usdt_pair {
        opt("usdt-pair", u.clone());
    }
    if a.args > 0 {
        opt("args", a.args.to_string());
    }
    if a.clone_args {
        opt("clone-args", "true".into());
    }
}
