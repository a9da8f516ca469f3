//! Idle waits and lock contention end to end (issue 31): ebrec records testdata's idle_pool
//! (`--offcpu=1000 --lock`): a thread pool whose four workers wait for tasks on a condvar,
//! two of them contending on one mutex in the tasks; a thread in accept() on a listening
//! socket no client connects to, one in epoll_wait(), a timer thread sleeping between
//! ticks. `ebsym top --kind offcpu` must call the accept, epoll, timer and get-task waits
//! idle with their reasons and the task's mutex wait not; the summary's lock finding must
//! name the contended mutex's function, not the pool's condvar; `ebsym locks` must rank
//! that mutex first. Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_json, expect_line, root, run};
use serde_json::Value;

/// The function names of a row's frames, leaf first.
fn functions(row: &Value) -> Vec<String> {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

fn has(row: &Value, prefix: &str) -> bool {
    functions(row).iter().any(|f| f.starts_with(prefix))
}

fn rows(report: &Value) -> &Vec<Value> {
    report["rows"].as_array().unwrap()
}

/// Every row of `report` whose frames have a function starting with `prefix`.
fn with<'a>(report: &'a Value, prefix: &str) -> Vec<&'a Value> {
    rows(report).iter().filter(|r| has(r, prefix)).collect()
}

#[test]
fn idle_pool_idle_waits_and_contention_first() {
    if !root() {
        return;
    }
    let rec = common::record(
        "idle_pool",
        &["--offcpu=1000", "--lock"],
        &["--seconds", "1.5"],
    );
    let expect = expect_line(&rec.out, "idle_pool");
    let sym = rec.trace.with_file_name("t.sym.pb.zst");
    run(
        &common::ebsym_path(),
        &[rec.trace.to_str().unwrap(), "-o", sym.to_str().unwrap()],
    );
    let t = sym.to_str().unwrap();
    let tid = |k: &str| expect[k].as_u64().unwrap().to_string();

    // Off-CPU: each idle thread's wait, idle with its reason.
    let offcpu = |extra: &[&str]| {
        let mut a = vec!["top", t, "--kind", "offcpu", "-n", "1000"];
        a.extend_from_slice(extra);
        ebsym_json(&a)
    };
    for (who, func, reason) in [
        ("accept_tid", "net::accept_loop", "accept wait"),
        ("epoll_tid", "net::event_loop", "epoll wait"),
        (
            "timer_tid",
            "timers::TimerThread::run",
            "timer thread waiting for its next timer",
        ),
    ] {
        let top = offcpu(&["--tid", &tid(who)]);
        let waits = with(&top, func);
        assert!(!waits.is_empty(), "{who}: no {func} row: {top:#}");
        let longest = waits
            .iter()
            .max_by_key(|r| r["total_ns"].as_u64().unwrap())
            .unwrap();
        assert_eq!(longest["idle"], true, "{who}: {longest:#}");
        assert_eq!(longest["idle_reason"], reason, "{who}: {longest:#}");
    }
    // The accept and epoll threads were blocked from start to end: over a second each.
    for who in ["accept_tid", "epoll_tid"] {
        let top = offcpu(&["--tid", &tid(who)]);
        let idle: u64 = rows(&top)
            .iter()
            .filter(|r| r["idle"] == true)
            .map(|r| r["total_ns"].as_u64().unwrap())
            .sum();
        assert!(idle >= 1_000_000_000, "{who}: idle {idle} ns: {top:#}");
    }

    // The pool's workers: the get-task waits idle, the task's mutex waits not.
    let all = offcpu(&[]);
    let get_task = with(&all, "pool::ThreadPool::get_task");
    let waits: Vec<&&Value> = get_task
        .iter()
        .filter(|r| functions(r).iter().any(|f| f.contains("pthread_cond_wait")))
        .filter(|r| !functions(r).iter().any(|f| f.contains("lll_lock")))
        .collect();
    assert!(!waits.is_empty(), "no get_task condvar wait: {all:#}");
    for r in &waits {
        assert_eq!(r["idle_reason"], "thread pool waiting for a task", "{r:#}");
    }
    let ledger = with(&all, "contend::Ledger::add");
    assert!(!ledger.is_empty(), "no contended ledger mutex: {all:#}");
    for r in &ledger {
        assert_eq!(r["idle"], false, "{r:#}");
    }
    // Work first, idle after: no idle row before a row that is work.
    let flags: Vec<bool> = rows(&all).iter().map(|r| r["idle"] == true).collect();
    let first_idle = flags.iter().position(|i| *i).unwrap();
    assert!(flags[first_idle..].iter().all(|i| *i), "{flags:?}");
    assert!(all["totals"]["idle_ns"].as_u64().unwrap() > 0, "{all:#}");

    // --no-idle-rules: every decision overridden; --idle adds one.
    let none = offcpu(&["--no-idle-rules"]);
    assert!(rows(&none).iter().all(|r| r["idle"] == false), "{none:#}");
    let mine = offcpu(&["--no-idle-rules", "--idle", "driver::submit_rounds*"]);
    let driver = with(&mine, "driver::submit_rounds");
    assert!(!driver.is_empty(), "{mine:#}");
    for r in rows(&mine) {
        let want = has(r, "driver::submit_rounds");
        assert_eq!(r["idle"] == true, want, "{r:#}");
        if want {
            assert_eq!(r["idle_reason"], "--idle driver::submit_rounds*");
        }
    }

    // Locks: the contended ledger mutex first, with its holder; the pool's condvar waits
    // after, idle.
    let ledger_mutex = expect["ledger_mutex"].as_str().unwrap();
    let locks = ebsym_json(&["locks", t, "-n", "1000"]);
    let first = &rows(&locks)[0];
    assert_eq!(first["mutex"], ledger_mutex, "{locks:#}");
    assert_eq!(first["wait_kind"], "mutex", "{first:#}");
    assert_eq!(first["contention"], true, "{first:#}");
    assert!(has(first, "contend::Ledger::add"), "{first:#}");
    let holder: Vec<String> = first["waker_frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        holder.iter().any(|f| f.starts_with("contend::Ledger::add")),
        "the holder releasing it: {holder:?}"
    );
    let cond: Vec<&Value> = rows(&locks)
        .iter()
        .filter(|r| has(r, "pool::ThreadPool::get_task") && r["wait_kind"] == "condvar")
        .collect();
    assert!(!cond.is_empty(), "{locks:#}");
    for r in &cond {
        assert_eq!(r["idle_reason"], "thread pool waiting for a task", "{r:#}");
    }
    // The condvar waits are longer than the mutex waits, and still ranked after them.
    let cond_ns: u64 = cond.iter().map(|r| r["wait_ns"].as_u64().unwrap()).sum();
    assert!(cond_ns > first["wait_ns"].as_u64().unwrap(), "{locks:#}");

    // The summary: the lock finding names the contended mutex's function, the off-CPU
    // finding says how much was idle and why.
    let summary = ebsym_json(&["summary", t]);
    let finding = |family: &str| -> Value {
        summary["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["family"] == family)
            .cloned()
            .unwrap_or_else(|| panic!("no {family} finding: {summary:#}"))
    };
    let lock = finding("lock");
    assert_eq!(
        lock["subject"],
        format!("mutex {ledger_mutex} in contend::Ledger::add"),
        "{lock:#}"
    );
    assert!(
        lock["idle"]["thread pool waiting for a task"]
            .as_f64()
            .unwrap()
            > 0.5
    );
    let off = finding("offcpu");
    assert!(
        !off["subject"].as_str().unwrap().contains("get_task")
            && !off["subject"].as_str().unwrap().contains("accept_loop"),
        "{off:#}"
    );
    for reason in [
        "accept wait",
        "epoll wait",
        "thread pool waiting for a task",
        "timer thread waiting for its next timer",
    ] {
        assert!(
            off["idle"][reason].as_f64().unwrap() > 0.0,
            "{reason}: {off:#}"
        );
    }
    assert!(
        off["finding"].as_str().unwrap().contains("(idle waits, "),
        "{off:#}"
    );
}
