//! Known answers on a real server (issue 31): Debian's PostgreSQL, started by the test in a
//! temporary directory, loaded by pgbench with a cause the test plants, diagnosed with
//! `ebrec diagnose -p POSTMASTER` (the backends each connection forks are followed from
//! their fork). The binary is Debian's, stripped: the function names come from its .dynsym
//! (PostgreSQL exports its functions for extensions).
//!
//! - hot row: eight clients update the same row; each waits for the row lock the one
//!   before it holds (`XactLockTableWait` -> `LockAcquireExtended` -> `ProcSleep` ->
//!   `WaitLatch` -> `epoll_wait`). The off-CPU finding is that wait, not idle, though
//!   the last call is the same epoll_wait an idle backend makes.
//! - fsync-bound commits: clients insert a row per transaction with `fsync` and
//!   `synchronous_commit` on; their time off the CPU is in the commit's WAL flush
//!   (`XLogFlush`: the fdatasync, or the wait for the backend doing it).
//! - idle: clients that think 20 ms between short queries; the backends wait for them
//!   (`secure_read` -> `WaitEventSetWait` -> `epoll_wait`): the off-CPU time is idle.
//!
//! Each scenario records 4 s. diagnose runs with `--max-cpu 50`: the test checks the
//! findings, and on a loaded 2-CPU machine the default 5% budget may pause the families
//! the findings come from (the budget has tests of its own, budget.rs).
use crate::common;

use common::{ebsym_json, ebsym_path, root, run};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Debian's PostgreSQL binaries (/usr/lib/postgresql/N/bin), the newest N.
pub(crate) fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pgbench").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// A PostgreSQL server of the test's own: a data directory under /var/tmp (owned by the
/// postgres user, as initdb wants), on 127.0.0.1 and a free port; stopped and removed on
/// drop.
pub(crate) struct Server {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Server {
    pub(crate) fn start(bin: &Path) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("ebtrace-pg")
            .tempdir_in("/var/tmp")
            .unwrap();
        let ok = Command::new("chown")
            .args(["postgres:", dir.path().to_str().unwrap()])
            .status()
            .unwrap();
        assert!(ok.success());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data = dir.path().join("data");
        let s = Server {
            bin: bin.to_path_buf(),
            dir,
            port,
        };
        s.as_postgres(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        let opts = format!(
            "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c max_connections=40 -c fsync=on -c synchronous_commit=on",
            s.dir.path().display()
        );
        s.as_postgres(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                s.dir.path().join("server.log").to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        );
        s
    }

    fn as_postgres(&self, tool: &str, args: &[&str]) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The postmaster's pid (the first line of postmaster.pid).
    pub(crate) fn pid(&self) -> u32 {
        let t = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).unwrap();
        t.lines().next().unwrap().trim().parse().unwrap()
    }

    fn sql(&self, sql: &str) {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U"])
            .args([
                "postgres",
                "-p",
                &self.port.to_string(),
                "-c",
                sql,
                "postgres",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// pgbench running `script` with `clients` for `secs` seconds.
    fn pgbench(&self, script: &str, clients: u32, secs: u32) -> Child {
        self.pgbench_with(script, clients, &["-T", &secs.to_string()])
    }

    /// pgbench running `script` with `clients`, each `transactions` times.
    pub(crate) fn pgbench_transactions(
        &self,
        script: &str,
        clients: u32,
        transactions: u32,
    ) -> Child {
        self.pgbench_with(script, clients, &["-t", &transactions.to_string()])
    }

    fn pgbench_with(&self, script: &str, clients: u32, how: &[&str]) -> Child {
        let f = self
            .dir
            .path()
            .join(format!("script-{clients}-{}.sql", how.join("")));
        std::fs::write(&f, script).unwrap();
        Command::new(self.bin.join("pgbench"))
            .args(["-n", "-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .args(["-c", &clients.to_string(), "-j", "2"])
            .args(how)
            .arg("-f")
            .arg(&f)
            .arg("postgres")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `ebrec diagnose -p POSTMASTER` for 4 s while pgbench runs `script` (started once
    /// diagnose says it records); the summary and the off-CPU top report.
    fn diagnose(&self, name: &str, script: &str, clients: u32, extra: &[&str]) -> (Value, Value) {
        let out = self.dir.path().join(name);
        let mut d = Command::new(env!("CARGO_BIN_EXE_ebrec"))
            .arg("diagnose")
            .args(["-p", &self.pid().to_string()])
            .args(["--duration", "4", "--max-cpu", "50"])
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg("--ebsym")
            .arg(ebsym_path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(d.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("diagnose ended before it recorded: {said}");
            }
            said.push_str(&line);
            if line.contains("recording to") {
                break;
            }
        }
        let bench = self.pgbench(script, clients, 3);
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let b = bench.wait_with_output().unwrap();
        assert!(
            b.status.success(),
            "pgbench: {}",
            String::from_utf8_lossy(&b.stderr)
        );
        let st = d.wait().unwrap();
        said.push_str(&rest.join().unwrap());
        assert!(st.success(), "diagnose: {said}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let sym = out.join("trace.sym.pb.zst");
        let top = ebsym_json(&["top", sym.to_str().unwrap(), "--kind", "offcpu", "-n", "20"]);
        (summary, top)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args([
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
    }
}

fn finding<'a>(summary: &'a Value, family: &str) -> &'a Value {
    summary["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["family"] == family)
        .unwrap_or_else(|| panic!("no {family} finding: {summary:#}"))
}

/// The functions of the first row that is not idle.
fn first_busy_row(top: &Value) -> Vec<String> {
    let row = top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["idle"] != true)
        .unwrap_or_else(|| panic!("every off-CPU row is idle: {top:#}"));
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn postgres_known_causes_are_the_findings() {
    if !root() {
        return;
    }
    let Some(bin) = pg_bin() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no PostgreSQL (scripts/setup test installs it), and CI=true"
        );
        eprintln!(
            "\n*** SKIPPED: no PostgreSQL under /usr/lib/postgresql (scripts/setup test) ***\n"
        );
        return;
    };
    // Eight clients and a recording of every family: alone, not beside another test.
    let _alone = common::exclusive();
    let pg = Server::start(&bin);
    pg.sql("CREATE TABLE hot (id int PRIMARY KEY, v bigint); INSERT INTO hot VALUES (1, 0);");
    pg.sql("CREATE TABLE log (id bigserial PRIMARY KEY, at timestamptz DEFAULT now());");

    // Hot row: the wait for the row lock, not idle. With the statements as requests
    // (diagnose --request): requests.txt first, its tail naming the row lock.
    let (summary, top) = pg.diagnose(
        "hot",
        "UPDATE hot SET v = v + 1 WHERE id = 1;\n",
        8,
        &["--request", "usdt:postgresql:query__start,query__done"],
    );
    let req: Value = serde_json::from_str(
        &std::fs::read_to_string(pg.dir.path().join("hot/requests.json")).unwrap(),
    )
    .unwrap();
    assert!(req["count"].as_u64().unwrap() > 100, "{req:#}");
    assert_eq!(
        req["tail"]["causes"][0]["cause"], "off CPU: lock",
        "{:#}",
        req["tail"]
    );
    assert!(
        req["tail"].to_string().contains("XactLockTableWait"),
        "{:#}",
        req["tail"]
    );
    // The busiest wait that is not idle is the row lock (with the old idle rules it was
    // idle, and the finding named another wait). The postmaster's select loop, idle, is a
    // share of the total that depends on how long the clients ran: not asserted.
    let off = finding(&summary, "offcpu");
    assert!(
        off["subject"]
            .as_str()
            .unwrap()
            .contains("XactLockTableWait"),
        "hot row: the finding does not name the row lock: {off:#}"
    );
    let busy = first_busy_row(&top);
    assert!(
        busy.iter().any(|f| f == "XactLockTableWait"),
        "hot row: the top wait is not the row lock: {busy:?}\n{summary:#}"
    );

    // fsync-bound commits: the WAL flush at commit.
    // With one more idle shape of the user's (diagnose passes --idle to every report):
    // the backends' waits for their client's next query, under pq_getbyte, are idle by
    // it (the user's patterns come first).
    let (summary, top) = pg.diagnose(
        "fsync",
        "INSERT INTO log DEFAULT VALUES;\n",
        4,
        &["--idle", "pq_getbyte"],
    );
    let off = finding(&summary, "offcpu");
    assert!(
        off["idle"]["--idle pq_getbyte"].as_f64().unwrap_or(0.0) > 0.0,
        "{off:#}"
    );
    assert!(
        off["subject"].as_str().unwrap().contains("XLogFlush"),
        "commits: the finding does not name the WAL flush: {off:#}"
    );
    let busy = first_busy_row(&top);
    assert!(
        busy.iter().any(|f| f == "XLogFlush"),
        "commits: the top wait is not the WAL flush: {busy:?}\n{summary:#}"
    );
    assert!(
        summary["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["family"] == "bio"),
        "no block I/O finding: {summary:#}"
    );

    // Idle: clients that think between queries; the backends wait for them.
    let (summary, _) = pg.diagnose("idle", "SELECT 1;\n\\sleep 20 ms\n", 4, &[]);
    let off = finding(&summary, "offcpu");
    let idle = off["idle_share"].as_f64().unwrap_or(0.0);
    assert!(
        idle > 0.8,
        "idle clients: only {idle} of the off-CPU time idle: {off:#}"
    );
    assert!(
        off["idle"]["epoll wait"].as_f64().unwrap_or(0.0) > 0.5,
        "{off:#}"
    );
}

/// `ebrec record --request usdt:postgresql:query__start,query__done -p POSTMASTER` while
/// pgbench sends a known number of statements (8 clients × 40 transactions × 3 statements,
/// the simple protocol: one query__start/done pair each): every statement is one request,
/// in the backends forked for pgbench's connections (followed from their fork), none
/// unpaired. The eight clients update one row, so the slow statements wait for the row lock
/// the one before holds: the tail's stacks name `XactLockTableWait`.
#[test]
fn postgres_requests_are_the_statements_pgbench_sent() {
    if !root() {
        return;
    }
    let Some(bin) = pg_bin() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no PostgreSQL (scripts/setup test installs it), and CI=true"
        );
        eprintln!(
            "\n*** SKIPPED: no PostgreSQL under /usr/lib/postgresql (scripts/setup test) ***\n"
        );
        return;
    };
    let _alone = common::exclusive();
    let pg = Server::start(&bin);
    pg.sql("CREATE TABLE hot (id int PRIMARY KEY, v bigint); INSERT INTO hot VALUES (1, 0);");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("req.pb.zst");
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "record",
            "--request",
            "usdt:postgresql:query__start,query__done",
        ])
        .args(["--usdt-string", "postgresql:query__start:0"])
        .args(["--offcpu", "--cpu", "-p", &pg.pid().to_string(), "-o"])
        .arg(&trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("ebrec ended before it recorded: {said}");
        }
        said.push_str(&line);
        if line.contains("recording to") {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let (clients, transactions) = (8u64, 40u64);
    let script = "BEGIN;\nUPDATE hot SET v = v + 1 WHERE id = 1;\nEND;\n";
    let b = pg
        .pgbench_transactions(script, clients as u32, transactions as u32)
        .wait_with_output()
        .unwrap();
    assert!(
        b.status.success(),
        "pgbench: {}",
        String::from_utf8_lossy(&b.stderr)
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let st = rec.wait().unwrap();
    said.push_str(&rest.join().unwrap());
    assert!(st.success(), "ebrec: {said}");

    let t = trace.to_str().unwrap();
    let j = ebsym_json(&["requests", t, "-n", "5", "--tail", "90"]);
    assert_eq!(
        j["count"].as_u64(),
        Some(clients * transactions * 3),
        "every statement pgbench sent is a request: {j:#}\n{said}"
    );
    for k in ["nested", "unmatched_done", "open_at_end"] {
        assert_eq!(j[k].as_u64(), Some(0), "{k}: {j:#}");
    }
    // query__start's argument is the query text's address, the same buffer statement after
    // statement: not an id, so none is shown (8 backends: a handful of distinct values).
    let repeat = &j["ids_repeat"];
    assert!(
        repeat["distinct"].as_u64().unwrap() <= clients,
        "{repeat:#}"
    );
    assert!(
        j["slowest"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"].is_null()),
        "{:#}",
        j["slowest"]
    );
    let tail = j["tail"].to_string();
    assert!(
        tail.contains("XactLockTableWait"),
        "the tail does not name the row lock: {:#}",
        j["tail"]
    );
    // Recorded with --offcpu: the kernel split every statement.
    assert_eq!(
        j["kernel_split"]["requests"].as_u64(),
        Some(clients * transactions * 3),
        "{:#}",
        j["kernel_split"]
    );
    // The row lock's wait, named after the lock, and who let it go: another backend
    // releasing the row lock (its transaction's commit), inside its own statement.
    let lock = &j["tail"]["causes"][0];
    assert_eq!(lock["cause"], "off CPU: lock", "{:#}", j["tail"]);
    assert!(
        lock["stacks"][0]["place"]
            .as_str()
            .unwrap()
            .starts_with("XactLockTableWait"),
        "{lock:#}"
    );
    assert_eq!(lock["woken_by"][0]["thread"], "postgres", "{lock:#}");
    let slowest = &j["slowest"][0];
    let waker = slowest["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cause"] == "off CPU: lock")
        .map(|c| &c["woken_by"][0])
        .unwrap_or_else(|| panic!("the slowest is not a lock wait: {slowest:#}"));
    assert!(
        waker["thread"] == "postgres" && waker["request"]["duration_ns"].as_u64().is_some(),
        "the slowest's holder is not a backend inside a statement: {waker:#}"
    );
    // --usdt-string: the slowest statements' text (the query__start probe's argument 0),
    // the hot row's UPDATE; gone after `ebsym strip`.
    for r in j["slowest"].as_array().unwrap() {
        assert_eq!(r["text"], "UPDATE hot SET v = v + 1 WHERE id = 1;", "{r:#}");
    }
    let stripped = dir.path().join("stripped.pb.zst");
    let o = run(
        &ebsym_path(),
        &["strip", t, "-o", stripped.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && said.contains(" USDT string arguments ("),
        "{said}"
    );
    let j = ebsym_json(&[
        "requests",
        stripped.to_str().unwrap(),
        "-n",
        "5",
        "--tail",
        "90",
    ]);
    assert!(
        j["slowest"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["text"].is_null()),
        "{:#}",
        j["slowest"]
    );
    let dump = run(&ebsym_path(), &["dump", stripped.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&dump.stdout).contains("UPDATE hot"));
}
