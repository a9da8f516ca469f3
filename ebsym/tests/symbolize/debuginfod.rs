//! ebsym against a real debuginfod server (elfutils' `debuginfod -F DIR` on 127.0.0.1)
//! serving a test program's debug file and stripped binary: it fetches, checks, caches in
//! the standard layout, works from the cache with the server gone, and fails fast (with
//! the places it searched) when the server is unreachable or serves a wrong file.
//!
//! Without the `debuginfod` binary these tests are skipped, except under CI=true where
//! they fail: scripts/test installs it.
use crate::addr2line::compare_env;
use crate::common::*;
use crate::trace::*;
use ebtrace_proto::v1::UnresolvedReason;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether the `debuginfod` server can be run; under CI=true it must.
fn have_debuginfod() -> bool {
    let ok = Command::new("debuginfod")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "debuginfod is not installed (Debian package `debuginfod`; scripts/test installs it)"
        );
        eprintln!("SKIPPED: debuginfod is not installed");
    }
    ok
}

/// A port on 127.0.0.1 that nothing listens on (just now).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status of `GET path` on 127.0.0.1:`port`, if the server answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A running `debuginfod`, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts debuginfod on `dir` and waits (bounded) until it serves `build_id`'s debug
    /// file, i.e. until its first scan has found it.
    fn start(dir: &Path, work: &Path, build_id: &[u8]) -> Server {
        let path = format!("/buildid/{}/debuginfo", hex(build_id));
        for attempt in 0..3 {
            let port = free_port();
            let log =
                std::fs::File::create(work.join(format!("debuginfod-{attempt}.log"))).unwrap();
            let child = Command::new("debuginfod")
                .arg("-p")
                .arg(port.to_string())
                .arg("-d")
                .arg(work.join(format!("debuginfod-{attempt}.sqlite")))
                .arg("-F")
                .arg(dir)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("run debuginfod");
            let mut server = Server { child, port };
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if server.child.try_wait().unwrap().is_some() {
                    break; // lost the port to someone else: try another
                }
                if http_status(port, &path) == Some(200) {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            server.stop();
        }
        let logs: Vec<String> = (0..3)
            .filter_map(|i| std::fs::read_to_string(work.join(format!("debuginfod-{i}.log"))).ok())
            .collect();
        panic!("debuginfod never served {path}:\n{}", logs.join("\n---\n"));
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A program built with -g, stripped; its debug file and a copy of the stripped binary
/// in `srv/` (what the server serves); the binary itself moved away.
struct Served {
    f: Fixture,
    srv: PathBuf,
    cache: PathBuf,
    id: Vec<u8>,
}

fn served(program: &str) -> Served {
    let f = fixture(program);
    let id = build_id(&f.bin);
    let srv = f.dir.join("srv");
    std::fs::create_dir_all(&srv).unwrap();
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&f.full)
            .arg(srv.join(format!("{program}.debug"))),
    );
    std::fs::copy(&f.bin, srv.join(program)).unwrap();
    let cache = f.dir.join("cache");
    Served { f, srv, cache, id }
}

/// `ebsym TRACE -o OUT ARGS` with the cache at `cache`; returns stderr and the time taken.
fn symbolize_with(
    trace: &Path,
    out: &Path,
    cache: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (String, Duration) {
    let t = Instant::now();
    let o = run_ok(
        ebsym()
            .arg(trace)
            .arg("-o")
            .arg(out)
            .args(args)
            .env("DEBUGINFOD_CACHE_PATH", cache)
            .envs(env.iter().copied()),
    );
    (String::from_utf8(o.stderr).unwrap(), t.elapsed())
}

/// The searched places of the only module of a symbolized trace.
fn searched(s: &Symbolized) -> Vec<String> {
    s.modules[0]
        .searched
        .iter()
        .map(|&i| s.tables.string(i).into_owned())
        .collect()
}

/// A trace of one stack in `program` (recorded at a path that does not exist here):
/// a leaf with inlined frames in handle_request and a return address in worker_loop.
fn shop_trace(sv: &Served) -> (PathBuf, [u64; 2]) {
    let img = Image::new(&sv.f.bin, Path::new("/nonexistent/shop"), BASE);
    let (handle, size) = function_address(
        &sv.f.full,
        "_ZN4shop6Server14handle_requestEmRNS_11WorkerStatsE",
    );
    let (worker, wsize) = function_address(
        &sv.f.full,
        "_ZN4shop6Server11worker_loopElPNS_11WorkerStatsE",
    );
    let leaf = (handle..handle + size)
        .find(|&a| binutils_chain(&sv.f.full, a).len() >= 2)
        .expect("handle_request has inlined code");
    let ret = worker + wsize / 2;
    let trace = sv.f.dir.join("t.pb.zst");
    write_trace(&trace, &[img], &[vec![BASE + leaf, BASE + ret]]);
    (trace, [leaf, ret - 1])
}

fn check_resolved(sv: &Served, out: &Path, vaddrs: [u64; 2]) {
    let s = read_back(out);
    assert_eq!(s.modules.len(), 1);
    assert_eq!(
        s.modules[0].status(),
        UnresolvedReason::None,
        "{:?}",
        searched(&s)
    );
    for vaddr in vaddrs {
        let a = &s.addresses[&(s.modules[0].build_id, vaddr)];
        let ours: Vec<(String, String)> = a
            .frames
            .iter()
            .map(|fr| {
                (
                    s.tables.string(fr.function).into_owned(),
                    format!("{}:{}", s.tables.string(fr.file), fr.line),
                )
            })
            .collect();
        assert_eq!(ours, binutils_chain(&sv.f.full, vaddr), "at {vaddr:#x}");
    }
}

#[test]
fn debuginfod_addr2line_fetches_caches_and_works_offline() {
    if !have_debuginfod() {
        return;
    }
    let sv = served("shop");
    let mut server = Server::start(&sv.srv, &sv.f.dir, &sv.id);
    let addrs = sample_addresses(&sv.f.full, 25);
    let url = server.url();
    let env = [("DEBUGINFOD_CACHE_PATH", sv.cache.as_path())];
    // The stripped binary has no DWARF and no debuglink: only the server has it.
    compare_env(&sv.f.full, &sv.f.bin, &["--debuginfod", &url], &env, &addrs);
    let cached = sv.cache.join(hex(&sv.id)).join("debuginfo");
    assert_eq!(build_id(&cached), sv.id);
    assert!(!sv.cache.join(hex(&sv.id)).join("executable").exists());
    // Server gone: the cache answers.
    server.stop();
    compare_env(&sv.f.full, &sv.f.bin, &["--debuginfod", &url], &env, &addrs);
}

#[test]
fn debuginfod_trace_fetches_debug_file_and_binary_then_uses_the_cache() {
    if !have_debuginfod() {
        return;
    }
    let sv = served("shop");
    let mut server = Server::start(&sv.srv, &sv.f.dir, &sv.id);
    let (trace, vaddrs) = shop_trace(&sv);
    let out = sv.f.dir.join("t.sym.pb.zst");
    // The URL from the environment, as other debuginfod clients take it.
    let urls = format!("{} ", server.url());
    let (stderr, _) = symbolize_with(&trace, &out, &sv.cache, &[], &[("DEBUGINFOD_URLS", &urls)]);
    assert!(stderr.contains("2 resolved, 0 unresolved"), "{stderr}");
    check_resolved(&sv, &out, vaddrs);
    let dir = sv.cache.join(hex(&sv.id));
    assert_eq!(build_id(&dir.join("debuginfo")), sv.id);
    assert_eq!(build_id(&dir.join("executable")), sv.id);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "debuginfo" && n != "executable")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    server.stop();
    let url = server.url();
    let out2 = sv.f.dir.join("t2.sym.pb.zst");
    let (stderr, took) = symbolize_with(&trace, &out2, &sv.cache, &["--debuginfod", &url], &[]);
    assert!(stderr.contains("2 resolved, 0 unresolved"), "{stderr}");
    check_resolved(&sv, &out2, vaddrs);
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn no_debuginfod_gives_no_file_with_the_searched_places() {
    let sv = served("shop");
    let (trace, _) = shop_trace(&sv);
    let out = sv.f.dir.join("t.sym.pb.zst");
    // A server in the environment must not be asked.
    let (stderr, took) = symbolize_with(
        &trace,
        &out,
        &sv.cache,
        &["--no-debuginfod"],
        &[("DEBUGINFOD_URLS", "http://127.0.0.1:9")],
    );
    assert!(stderr.contains("no file with build-id"), "{stderr}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let s = read_back(&out);
    assert_eq!(s.modules[0].status(), UnresolvedReason::NoFile);
    let searched = searched(&s);
    assert!(
        searched.iter().any(|x| x == "/nonexistent/shop: not found"),
        "{searched:?}"
    );
    assert!(
        !searched.iter().any(|x| x.contains("127.0.0.1")),
        "{searched:?}"
    );
    assert!(!sv.cache.exists());
}

#[test]
fn unreachable_debuginfod_costs_seconds_and_gives_no_file() {
    let sv = served("shop");
    let (trace, _) = shop_trace(&sv);
    let out = sv.f.dir.join("t.sym.pb.zst");
    let url = format!("http://127.0.0.1:{}", free_port());
    let (stderr, took) = symbolize_with(&trace, &out, &sv.cache, &["--debuginfod", &url], &[]);
    eprintln!("unreachable server: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(stderr.contains("no file with build-id"), "{stderr}");
    let s = read_back(&out);
    assert_eq!(s.modules[0].status(), UnresolvedReason::NoFile);
    let searched = searched(&s);
    let asked = format!("{url}/buildid/{}/debuginfo: ", hex(&sv.id));
    assert!(
        searched.iter().any(|x| x.starts_with(&asked)),
        "{asked} not in {searched:?}"
    );
    // The binary is missing too, but the dead server is not asked again.
    let exe = format!("{url}/buildid/{}/executable: skipped", hex(&sv.id));
    assert!(
        searched.iter().any(|x| x.starts_with(&exe)),
        "{exe} not in {searched:?}"
    );
}

#[test]
fn debuginfod_answer_with_wrong_content_is_refused_and_not_cached() {
    let sv = served("shop");
    let (trace, _) = shop_trace(&sv);
    let other = build("forker", &sv.f.dir, "forker", &[]);
    for (body, want) in [
        (b"not an ELF file at all".to_vec(), UnresolvedReason::NoFile),
        (
            std::fs::read(&other).unwrap(),
            UnresolvedReason::BuildIdMismatch,
        ),
    ] {
        let server = Garbage::start(body);
        let out = sv.f.dir.join("t.sym.pb.zst");
        let (stderr, _) = symbolize_with(
            &trace,
            &out,
            &sv.cache,
            &["--debuginfod", &server.url()],
            &[],
        );
        let s = read_back(&out);
        assert_eq!(s.modules[0].status(), want, "{stderr}");
        assert!(s.addresses.values().all(|a| a.frames.is_empty()));
        let dir = sv.cache.join(hex(&sv.id));
        let files: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(files.is_empty(), "cached: {files:?}");
        assert!(server.requests() >= 1);
    }
}

/// An HTTP server on 127.0.0.1 that answers every request with 200 and `body`.
struct Garbage {
    port: u16,
    stop: Arc<AtomicBool>,
    served: Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Garbage {
    fn start(body: Vec<u8>) -> Garbage {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (stop2, served2) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&body);
                served2.fetch_add(1, Ordering::Relaxed);
            }
        });
        Garbage {
            port,
            stop,
            served,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
