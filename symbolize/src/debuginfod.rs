//! A debuginfod client: the last place [`crate::find::Locator`] looks for the files of a
//! build-id. It asks each server for `/buildid/HEX/debuginfo` (or `/executable`), checks
//! the build-id of what comes back, and keeps it in the standard client cache
//! (`$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`; files `HEX/debuginfo` and `HEX/executable`), which it
//! shares with elfutils' `debuginfod-find`, gdb and the rest.
//!
//! Bounded by design: a 2 s connect timeout, a whole-transfer timeout (30 s by default), a
//! size cap (2 GiB), and a server that failed once (unreachable, timed out) is not asked
//! again in this run, so a dead server costs seconds, not minutes. A 404 is an answer
//! ("not found there"), listed with the other searched places.
//!
//! ```no_run
//! use ebtrace_symbolize::debuginfod::{Client, Config, Kind};
//! let client = Client::new(Config::new(vec!["http://127.0.0.1:8002".into()]));
//! let got = client.fetch(&[0x1a, 0x2b], Kind::Debuginfo);
//! for s in &got.searched { eprintln!("{s}"); }
//! println!("{:?}", got.path);
//! ```
use crate::elf::{hex, ElfFile};
use crate::progress::{Download, NoProgress, Progress};
use crate::searched::{Outcome, Searched};
use std::collections::HashSet;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which file of a build-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The separate debug file (`/buildid/HEX/debuginfo`).
    Debuginfo,
    /// The binary itself (`/buildid/HEX/executable`).
    Executable,
}

impl Kind {
    /// The last component of the URL and of the cache path.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Debuginfo => "debuginfo",
            Kind::Executable => "executable",
        }
    }
}

/// How the client behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Server base URLs, asked in order.
    pub urls: Vec<String>,
    /// The cache directory (see [`default_cache_dir`]).
    pub cache_dir: PathBuf,
    /// Connecting to a server.
    pub connect_timeout: Duration,
    /// One whole request, connect to last byte.
    pub timeout: Duration,
    /// Larger files are refused.
    pub max_size: u64,
    /// Report the progress of downloads longer than a second to the client's
    /// [`Progress`] (default: when stderr is a terminal).
    pub progress: bool,
}

impl Config {
    /// The defaults for `urls`: the standard cache, 2 s to connect, 30 s per file, 2 GiB.
    pub fn new(urls: Vec<String>) -> Config {
        Config {
            urls,
            cache_dir: default_cache_dir(),
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(30),
            max_size: 2 << 30,
            progress: std::io::stderr().is_terminal(),
        }
    }
}

/// The server URLs of `DEBUGINFOD_URLS` (space-separated), or none.
pub fn urls_from_env() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The standard client cache: `$DEBUGINFOD_CACHE_PATH`, else
/// `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`.
pub fn default_cache_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = var("DEBUGINFOD_CACHE_PATH") {
        return PathBuf::from(p);
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("debuginfod_client");
    }
    let home = var("HOME").map(PathBuf::from).unwrap_or_else(|| "/".into());
    home.join(".cache").join("debuginfod_client")
}

/// A build-id in the form used in URLs and cache paths: lowercase hex, whole bytes,
/// nothing else (so it can never climb out of the cache directory).
fn valid_hex(s: &str) -> bool {
    !s.is_empty()
        && s.len() & 1 == 0
        && s.len() <= 128
        && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What one [`Client::fetch`] found, and what it tried.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The file in the cache, with the right build-id.
    pub path: Option<PathBuf>,
    /// The servers asked (URL and answer), in order. A cache hit asks none.
    pub searched: Vec<Searched>,
}

/// The client: its settings and the servers found dead in this run.
pub struct Client {
    config: Config,
    agent: ureq::Agent,
    dead: Mutex<HashSet<String>>,
    progress: Arc<dyn Progress>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

/// Why a download did not give a file; `dead` when the server should not be asked again.
struct Failure {
    outcome: Outcome,
    dead: bool,
}

impl Failure {
    fn soft(outcome: Outcome) -> Failure {
        Failure {
            outcome,
            dead: false,
        }
    }
}

impl Client {
    /// A client that reports no progress.
    pub fn new(config: Config) -> Client {
        Client::with_progress(config, Arc::new(NoProgress))
    }

    /// A client that reports downloads longer than a second to `progress` (when
    /// [`Config::progress`] is on).
    pub fn with_progress(config: Config, progress: Arc<dyn Progress>) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(config.connect_timeout))
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .user_agent(concat!("ebsym/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            config,
            agent,
            dead: Mutex::new(HashSet::new()),
            progress,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The cache path of `kind` for `build_id` (`CACHE/HEX/debuginfo`).
    pub fn cache_path(&self, build_id: &[u8], kind: Kind) -> Option<PathBuf> {
        let h = hex(build_id);
        valid_hex(&h).then(|| self.config.cache_dir.join(h).join(kind.name()))
    }

    /// The file `kind` of `build_id`: from the cache, else from the first server that has
    /// it with the right build-id (then cached).
    pub fn fetch(&self, build_id: &[u8], kind: Kind) -> Fetched {
        let mut out = Fetched::default();
        let Some(cached) = self.cache_path(build_id, kind) else {
            return out;
        };
        if cached.is_file() {
            if has_build_id(&cached, build_id).is_ok() {
                out.path = Some(cached);
                return out;
            }
            // A damaged entry, or elfutils' empty "not found" marker: ask again.
            let _ = std::fs::remove_file(&cached);
        }
        let h = hex(build_id);
        for base in &self.config.urls {
            let url = format!("{}/buildid/{h}/{}", base.trim_end_matches('/'), kind.name());
            let shown = PathBuf::from(&url);
            if self.dead.lock().unwrap().contains(base) {
                out.searched.push(Searched {
                    path: shown,
                    outcome: Outcome::Unavailable("skipped: server failed earlier".into()),
                });
                continue;
            }
            match self.download(&url, build_id, &cached) {
                Ok(()) => {
                    out.path = Some(cached);
                    return out;
                }
                Err(f) => {
                    if f.dead {
                        self.dead.lock().unwrap().insert(base.clone());
                    }
                    out.searched.push(Searched {
                        path: shown,
                        outcome: f.outcome,
                    });
                }
            }
        }
        out
    }

    fn download(&self, url: &str, build_id: &[u8], dest: &Path) -> Result<(), Failure> {
        let started = Instant::now();
        let resp = self.agent.get(url).call().map_err(|e| Failure {
            dead: !matches!(e, ureq::Error::BadUri(_)),
            outcome: Outcome::Unavailable(transport_error(&e, started)),
        })?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Err(Failure::soft(Outcome::Missing)),
            s => return Err(Failure::soft(Outcome::Unavailable(format!("HTTP {s}")))),
        }
        let len = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let cap = self.config.max_size;
        if len.is_some_and(|l| l > cap) {
            return Err(Failure::soft(Outcome::Unavailable(format!(
                "refused: {} bytes, over the {cap}-byte cap",
                len.unwrap_or_default()
            ))));
        }
        let dir = dest.parent().expect("cache paths have a parent");
        let io = |e: std::io::Error| Failure::soft(Outcome::Unavailable(format!("cache: {e}")));
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".ebsym-")
            .tempfile_in(dir)
            .map_err(io)?;
        let mut body = resp.into_body().into_reader();
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        let mut bar: Option<Box<dyn Download>> = None;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Failure {
                        outcome: Outcome::Unavailable(format!("transfer failed: {e}")),
                        dead: true,
                    })
                }
            };
            total += n as u64;
            if total > cap {
                return Err(Failure::soft(Outcome::Unavailable(format!(
                    "refused: over the {cap}-byte cap"
                ))));
            }
            tmp.write_all(&buf[..n]).map_err(io)?;
            if bar.is_none() && self.config.progress && started.elapsed() > Duration::from_secs(1) {
                bar = Some(self.progress.download(url, len));
            }
            if let Some(b) = &bar {
                b.position(total);
            }
        }
        if let Some(b) = bar {
            b.done();
        }
        if len.is_some_and(|l| l != total) {
            return Err(Failure::soft(Outcome::Unavailable(format!(
                "short transfer: {total} of {} bytes",
                len.unwrap_or_default()
            ))));
        }
        tmp.flush().map_err(io)?;
        // Checked before it enters the cache: a wrong file there would be trusted later.
        if let Err(outcome) = has_build_id(tmp.path(), build_id) {
            return Err(Failure::soft(outcome));
        }
        tmp.persist(dest).map_err(|e| io(e.error))?;
        Ok(())
    }
}

/// Whether `path` is an ELF file with build-id `want`; else what it is.
fn has_build_id(path: &Path, want: &[u8]) -> Result<(), Outcome> {
    let f = ElfFile::open(path).map_err(|e| Outcome::Unreadable(e.to_string()))?;
    let info = f.info().map_err(Outcome::Unreadable)?;
    match info.build_id.as_deref() {
        Some(h) if h == want => Ok(()),
        other => Err(Outcome::BuildIdMismatch(
            other.map(hex).unwrap_or_else(|| "none".into()),
        )),
    }
}

fn transport_error(e: &ureq::Error, started: Instant) -> String {
    let what = match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::Io(io) => format!("unreachable ({io})"),
        other => other.to_string(),
    };
    format!("{what} after {:.1} s", started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_hex_makes_a_cache_path() {
        assert!(valid_hex("00ff1a"));
        for bad in ["", "0", "0F", "../x", "ab/cd", "zz"] {
            assert!(!valid_hex(bad), "{bad}");
        }
        let c = Client::new(Config {
            cache_dir: "/c".into(),
            ..Config::new(vec![])
        });
        assert_eq!(
            c.cache_path(&[0xab, 0x01], Kind::Debuginfo),
            Some(PathBuf::from("/c/ab01/debuginfo"))
        );
        assert_eq!(c.cache_path(&[], Kind::Executable), None);
    }
}
