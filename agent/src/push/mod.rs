//! Pushing windows to profiling backends (`ebrec agent --push`, `ebrec push`): each closed
//! window (a trace file) becomes one profile per kind ([`profiles`]), sent to every
//! backend by its own API: [`pyroscope`] (`/ingest`, multipart pprof), [`parca`]
//! (`ProfileStoreService.WriteRaw` over gRPC-Web), [`otlp`] (OTLP/HTTP
//! `/v1development/profiles`).
//!
//! Threads: [`Pusher::window`] only queues the path (a bounded queue: the oldest window is
//! dropped, and counted, when it is full) and returns; one converter thread (at a lower
//! priority) builds the profiles and each backend's requests; one thread per backend sends
//! them from its own bounded queue (by count and by bytes, oldest dropped when full),
//! retrying with exponential backoff (1 s, 2 s, … 60 s, with jitter) on 5xx, 408, 429,
//! timeouts, resets and garbage answers; other 4xx drop the request at once, the server's
//! message printed once. A window's `done` runs when the last request made of it is
//! finished with (pushed or dropped), on whichever thread that is.
pub mod otlp;
pub mod parca;
pub mod profiles;
pub mod pyroscope;

use anyhow::{bail, Context, Result};
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What to push, and where.
#[derive(Debug, Clone, Default)]
pub struct PushConfig {
    /// `pyroscope+http(s)://HOST:PORT`, `parca+http(s)://HOST:PORT`,
    /// `otlp+http(s)://HOST:PORT` (a path after the port is a prefix of the API's paths).
    pub urls: Vec<String>,
    /// The service name (default: the comm of the window's busiest process).
    pub service: Option<String>,
    /// Credentials and headers: lines `basic USER:PASSWORD`, `bearer TOKEN`, `tenant ID`,
    /// `header NAME: VALUE`.
    pub auth_file: Option<PathBuf>,
    /// Symbolize on this host, with DWARF (default: addresses and build-ids, the backend
    /// symbolizes; Pyroscope's profiles named from the ELF symbol tables).
    pub symbolize: bool,
    pub debug_dirs: Vec<PathBuf>,
    /// Labels of every profile (host and kernel are added).
    pub labels: Vec<(String, String)>,
}

/// How hard a [`Pusher`] tries: the agent's defaults, or a one-shot push's.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Attempts per request before it is dropped (None: until it is pushed, or pushed out
    /// of the queue by newer windows).
    pub max_attempts: Option<u32>,
    /// Connecting may take this long…
    pub connect_timeout: Duration,
    /// …and a whole request this long.
    pub request_timeout: Duration,
    /// The first retry's delay (doubled each time up to `max_backoff`).
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Bytes of request bodies a backend's queue holds at most.
    pub max_queue_bytes: usize,
    /// Print a backend's first drops (the agent); a one-shot push returns them instead.
    pub print_drops: bool,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            max_attempts: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            max_queue_bytes: 64 << 20,
            print_drops: true,
        }
    }
}

/// Windows waiting for the converter beyond this many: the oldest is dropped.
const CONVERT_QUEUE: usize = 4;

/// Per backend: what happened so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// The backend's URL as given (`pyroscope+http://…`).
    pub url: String,
    /// `pyroscope`, `parca` or `otlp`.
    pub backend: &'static str,
    /// Requests (profiles: Pyroscope; windows: Parca, OTLP) the backend took.
    pub pushed: u64,
    /// Attempts that failed (each retry of a request counts).
    pub failed: u64,
    /// Requests given up: refused (4xx), out of attempts, pushed out of a full queue, or
    /// left at shutdown.
    pub dropped: u64,
    /// Requests waiting now.
    pub queued: u64,
    /// Bytes waiting now.
    pub queued_bytes: u64,
    /// How long the last successful request took, ms.
    pub last_latency_ms: u64,
    /// The last failure, one line.
    pub last_error: Option<String>,
}

/// Every backend's [`BackendStats`], in the order of the URLs; and the windows the
/// converter dropped (it was behind) or could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushStats {
    pub backends: Vec<BackendStats>,
    pub windows: u64,
    pub windows_dropped: u64,
    pub windows_failed: u64,
}

/// A backend's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Pyroscope,
    Parca,
    Otlp,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Pyroscope => "pyroscope",
            Api::Parca => "parca",
            Api::Otlp => "otlp",
        }
    }
}

/// A parsed push URL.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub api: Api,
    /// `http(s)://HOST:PORT[/prefix]`, no trailing slash.
    pub base: String,
    /// As given.
    pub url: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint> {
        let Some((api, rest)) = url.split_once('+') else {
            bail!("--push {url}: not API+http(s)://HOST:PORT (API: pyroscope, parca, otlp)");
        };
        let api = match api {
            "pyroscope" => Api::Pyroscope,
            "parca" => Api::Parca,
            "otlp" => Api::Otlp,
            _ => bail!("--push {url}: unknown backend {api:?} (pyroscope, parca, otlp)"),
        };
        let Some((scheme, hostpath)) = rest.split_once("://") else {
            bail!("--push {url}: not {}+http(s)://HOST:PORT", api.name());
        };
        if scheme != "http" && scheme != "https" {
            bail!("--push {url}: scheme {scheme:?} is not http or https");
        }
        let (host, path) = match hostpath.find('/') {
            Some(i) => hostpath.split_at(i),
            None => (hostpath, ""),
        };
        if host.is_empty() || host.contains('@') {
            bail!("--push {url}: no HOST:PORT (credentials go in --auth-file, never in the URL)");
        }
        if path.contains('?') || path.contains('#') {
            bail!("--push {url}: no query or fragment expected");
        }
        if let Some((_, port)) = host.rsplit_once(':') {
            if !port.ends_with(']') && port.parse::<u16>().is_err() {
                bail!("--push {url}: bad port {port:?}");
            }
        }
        Ok(Endpoint {
            api,
            base: format!("{scheme}://{host}{}", path.trim_end_matches('/')),
            url: url.to_string(),
        })
    }
}

/// The headers an auth file says, for every request. Lines: `basic USER:PASSWORD`,
/// `bearer TOKEN`, `tenant ID` (X-Scope-OrgID), `header NAME: VALUE`; `#` comments and
/// blank lines. Warns when the file is readable by group or others.
pub fn read_auth_file(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the auth file {}", path.display()))?;
    if let Ok(m) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if m.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "ebrec: warning: {} is readable by others (mode {:o}): chmod 600 it",
                path.display(),
                m.permissions().mode() & 0o777
            );
        }
    }
    parse_auth(&text, &path.display().to_string())
}

fn parse_auth(text: &str, name: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{name}:{}", i + 1);
        let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        if rest.is_empty() {
            bail!("{at}: `{word}` needs a value");
        }
        match word {
            "basic" => {
                if !rest.contains(':') {
                    bail!("{at}: basic wants USER:PASSWORD");
                }
                out.push((
                    "Authorization".into(),
                    format!("Basic {}", base64(rest.as_bytes())),
                ));
            }
            "bearer" => out.push(("Authorization".into(), format!("Bearer {rest}"))),
            "tenant" => out.push(("X-Scope-OrgID".into(), rest.to_string())),
            "header" => {
                let Some((k, v)) = rest.split_once(':') else {
                    bail!("{at}: header wants NAME: VALUE");
                };
                let k = k.trim();
                if k.is_empty()
                    || !k
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
                {
                    bail!("{at}: bad header name {k:?}");
                }
                out.push((k.to_string(), v.trim().to_string()));
            }
            _ => bail!(
                "{at}: unknown line `{word} …` (basic USER:PASSWORD, bearer TOKEN, tenant ID, header NAME: VALUE)"
            ),
        }
    }
    Ok(out)
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// One HTTP request to a backend (a POST).
#[derive(Debug, Clone)]
pub struct Request {
    /// What it carries, for messages: `cpu`, `window`.
    pub what: String,
    /// Path and query after the endpoint's base.
    pub path: String,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A backend's answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as one line of text (at most 300 characters).
    pub fn message(&self) -> String {
        one_line(&String::from_utf8_lossy(&self.body), 300)
    }
}

pub fn one_line(s: &str, max: usize) -> String {
    let s: String = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(max)
        .collect();
    if s.is_empty() {
        "(no message)".into()
    } else {
        s
    }
}

/// What to do after an attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Pushed,
    /// Try again later (the reason).
    Retry(String),
    /// Give up on this request (the reason).
    Drop(String),
}

/// The HTTP status's verdict (None: a 2xx, for the backend to judge its body).
pub fn judge_status(r: &Reply) -> Option<Outcome> {
    match r.status {
        200..=299 => None,
        408 | 429 | 500..=599 => Some(Outcome::Retry(format!(
            "HTTP {}: {}",
            r.status,
            r.message()
        ))),
        400..=499 => Some(Outcome::Drop(format!("HTTP {}: {}", r.status, r.message()))),
        s => Some(Outcome::Retry(format!(
            "unexpected HTTP {s}: {}",
            r.message()
        ))),
    }
}

/// The system's CA certificates (SSL_CERT_FILE, else Debian's and Fedora's bundles), or
/// webpki's roots when none is found.
fn root_certs() -> ureq::tls::RootCerts {
    let candidates = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem",
            ]
            .map(PathBuf::from),
        );
    for p in candidates {
        let Ok(pem) = std::fs::read(&p) else { continue };
        let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if !certs.is_empty() {
            return ureq::tls::RootCerts::from(certs);
        }
    }
    ureq::tls::RootCerts::WebPki
}

/// The HTTP client: ureq with rustls, the system's CAs, the timeouts of `o`.
fn http_agent(o: &PushOptions) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(root_certs())
        .build();
    ureq::Agent::config_builder()
        .timeout_connect(Some(o.connect_timeout))
        .timeout_global(Some(o.request_timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(format!("ebrec/{}", env!("CARGO_PKG_VERSION")))
        .tls_config(tls)
        .build()
        .into()
}

/// Sends `req` to `ep`: the reply, or why there is none (a retryable failure).
fn send(
    agent: &ureq::Agent,
    ep: &Endpoint,
    auth: &[(String, String)],
    req: &Request,
) -> Result<Reply, String> {
    let url = format!("{}{}", ep.base, req.path);
    let mut r = agent.post(&url).header("Content-Type", &req.content_type);
    for (k, v) in auth.iter().chain(&req.headers) {
        r = r.header(k, v);
    }
    match r.send(&req.body[..]) {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let headers = resp
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let body = resp
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_vec()
                .map_err(|e| describe(&e))?;
            Ok(Reply {
                status,
                headers,
                body,
            })
        }
        Err(e) => Err(describe(&e)),
    }
}

fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused".into()
        }
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionReset => {
            "connection reset".into()
        }
        ureq::Error::Protocol(p) => format!("not an HTTP answer ({p})"),
        e => one_line(&e.to_string(), 200),
    }
}

/// Calls the window's `done` when the last request made of it is dropped.
struct Done(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(f) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            f();
        }
    }
}

/// One request in a backend's queue.
struct Item {
    req: Request,
    _done: Arc<Done>,
}

/// A backend's queue and its counters, shared with its thread.
struct Backend {
    endpoint: Endpoint,
    state: Mutex<BackendState>,
    wake: Condvar,
}

#[derive(Default)]
struct BackendState {
    queue: VecDeque<Item>,
    bytes: usize,
    max_items: usize,
    stats: BackendStats,
    /// Messages printed already (each once).
    printed: HashSet<String>,
    /// The first drop's reason (a one-shot push's error).
    first_drop: Option<String>,
    closing: bool,
    abort: bool,
    exited: bool,
}

/// A window on its way to the converter.
struct Pending {
    path: PathBuf,
    from_ns: u64,
    until_ns: u64,
    done: Arc<Done>,
}

#[derive(Default)]
struct ConvState {
    queue: VecDeque<Pending>,
    /// Windows dropped by [`Pusher::window`], for the converter to let go of.
    discard: Vec<Pending>,
    closing: bool,
    abort: bool,
    exited: bool,
    windows: u64,
    dropped: u64,
    failed: u64,
    first_error: Option<String>,
}

struct Shared {
    cfg: PushConfig,
    options: PushOptions,
    auth: Vec<(String, String)>,
    backends: Vec<Arc<Backend>>,
    conv: Mutex<ConvState>,
    conv_wake: Condvar,
    host: String,
    kernel: String,
}

/// Pushes windows to the backends on its own threads.
pub struct Pusher {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    #[allow(dead_code)] // the agent exports stats(); kept for the metrics it may add
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher")
            .field("urls", &self.shared.cfg.urls)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)] // new, stats and shutdown: the agent loop's API
impl Pusher {
    /// Checks the URLs and reads the auth file (clear one-line errors), then starts the
    /// threads.
    pub fn new(cfg: PushConfig, metrics: Option<Arc<crate::metrics::Metrics>>) -> Result<Pusher> {
        Pusher::with_options(cfg, metrics, PushOptions::default())
    }

    pub fn with_options(
        cfg: PushConfig,
        metrics: Option<Arc<crate::metrics::Metrics>>,
        options: PushOptions,
    ) -> Result<Pusher> {
        if cfg.urls.is_empty() {
            bail!("no --push URL");
        }
        let endpoints = cfg
            .urls
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>>>()?;
        for (k, _) in &cfg.labels {
            if !valid_label_name(k) {
                bail!("--label {k}=…: a label name is [A-Za-z_][A-Za-z0-9_]*");
            }
        }
        let auth = match &cfg.auth_file {
            Some(p) => read_auth_file(p)?,
            None => Vec::new(),
        };
        let (host, kernel, _) = ebtrace_record::host::uname();
        let backends: Vec<Arc<Backend>> = endpoints
            .into_iter()
            .map(|endpoint| {
                Arc::new(Backend {
                    state: Mutex::new(BackendState {
                        stats: BackendStats {
                            url: endpoint.url.clone(),
                            backend: endpoint.api.name(),
                            ..Default::default()
                        },
                        max_items: 16,
                        ..Default::default()
                    }),
                    endpoint,
                    wake: Condvar::new(),
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            cfg,
            options,
            auth,
            backends,
            conv: Mutex::new(ConvState::default()),
            conv_wake: Condvar::new(),
            host,
            kernel,
        });
        let mut threads = Vec::new();
        {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("ebrec-push-conv".into())
                    .spawn(move || convert_loop(&s))?,
            );
        }
        for (i, b) in shared.backends.iter().enumerate() {
            let s = shared.clone();
            let b = b.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("ebrec-push-{i}"))
                    .spawn(move || send_loop(&s, &b))?,
            );
        }
        Ok(Pusher {
            shared,
            threads,
            metrics,
        })
    }

    /// A closed window file (realtime ns bounds). Returns at once; the window is converted
    /// and pushed on worker threads. `done` is called (on a worker thread) when every
    /// backend has finished with it (pushed or dropped), so the caller may delete the file.
    pub fn window(
        &self,
        path: PathBuf,
        from_ns: u64,
        until_ns: u64,
        done: Box<dyn FnOnce() + Send>,
    ) {
        let done = Arc::new(Done(Mutex::new(Some(done))));
        {
            let mut c = lock(&self.shared.conv);
            c.windows += 1;
            c.queue.push_back(Pending {
                path,
                from_ns,
                until_ns,
                done,
            });
            // The oldest go to the converter to be dropped there: their `done` runs on a
            // worker thread, never on the caller's.
            while c.queue.len() > CONVERT_QUEUE {
                c.dropped += 1;
                if let Some(p) = c.queue.pop_front() {
                    c.discard.push(p);
                }
            }
        }
        self.shared.conv_wake.notify_all();
    }

    pub fn stats(&self) -> PushStats {
        stats(&self.shared)
    }

    /// Tries to flush the queues until `deadline` has passed, then gives up (what is left
    /// counts as dropped). Threads still in a request are left to finish it alone.
    pub fn shutdown(self, deadline: Duration) {
        let _ = self.finish(deadline);
    }

    /// [`Pusher::shutdown`], returning the final stats and the first reason a window or a
    /// request was dropped or failed (for `ebrec push`).
    pub fn finish(self, deadline: Duration) -> (PushStats, Option<String>) {
        let end = Instant::now() + deadline;
        let s = &self.shared;
        lock(&s.conv).closing = true;
        s.conv_wake.notify_all();
        wait_until(&s.conv, &s.conv_wake, end, |c| c.exited);
        for b in &s.backends {
            lock(&b.state).closing = true;
            b.wake.notify_all();
        }
        for b in &s.backends {
            wait_until(&b.state, &b.wake, end, |st| st.exited);
        }
        // Past the deadline: drop what is left.
        let mut left = Vec::new();
        {
            let mut c = lock(&s.conv);
            c.abort = true;
            c.dropped += c.queue.len() as u64;
            left.extend(c.queue.drain(..).map(|p| p.done));
            left.extend(c.discard.drain(..).map(|p| p.done));
        }
        s.conv_wake.notify_all();
        let mut items = Vec::new();
        for b in &s.backends {
            let mut st = lock(&b.state);
            st.abort = true;
            let n = st.queue.len() as u64;
            st.stats.dropped += n;
            if n > 0 && st.first_drop.is_none() {
                st.first_drop = Some(format!(
                    "{} request(s) still queued at the end ({})",
                    n,
                    st.stats
                        .last_error
                        .clone()
                        .unwrap_or_else(|| "too slow".into())
                ));
            }
            items.extend(st.queue.drain(..));
            st.bytes = 0;
            b.wake.notify_all();
        }
        drop(items);
        drop(left);
        let exited: Vec<bool> = std::iter::once(lock(&s.conv).exited)
            .chain(s.backends.iter().map(|b| lock(&b.state).exited))
            .collect();
        for (t, done) in self.threads.into_iter().zip(exited) {
            if done {
                let _ = t.join();
            }
        }
        let mut first = lock(&s.conv).first_error.clone();
        for b in &s.backends {
            let st = lock(&b.state);
            if first.is_none() {
                if let Some(d) = &st.first_drop {
                    first = Some(format!("push to {}: {d}", b.endpoint.url));
                }
            }
        }
        (stats(s), first)
    }
}

fn stats(s: &Shared) -> PushStats {
    let c = lock(&s.conv);
    PushStats {
        backends: s
            .backends
            .iter()
            .map(|b| {
                let st = lock(&b.state);
                let mut x = st.stats.clone();
                x.queued = st.queue.len() as u64;
                x.queued_bytes = st.bytes as u64;
                x
            })
            .collect(),
        windows: c.windows,
        windows_dropped: c.dropped,
        windows_failed: c.failed,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait_until<T>(m: &Mutex<T>, cv: &Condvar, end: Instant, done: impl Fn(&T) -> bool) {
    let mut g = lock(m);
    while !done(&g) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        g = cv
            .wait_timeout(g, (end - now).min(Duration::from_millis(200)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

pub fn valid_label_name(k: &str) -> bool {
    let mut b = k.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A converted window, what the backends encode.
#[derive(Debug)]
pub struct Window {
    pub from_ns: u64,
    pub until_ns: u64,
    pub service: String,
    /// The series' labels: service_name, host, kernel, then the configured ones.
    pub labels: Vec<(String, String)>,
    pub info: profiles::WindowInfo,
    pub profiles: Vec<profiles::KindProfile>,
    /// The same profiles with user frames named from the host's ELF symbol tables (no
    /// DWARF), addresses and build-ids kept: what Pyroscope is sent (its ingest does not
    /// symbolize native frames). None when `profiles` are symbolized already, or no
    /// backend is Pyroscope.
    pub named: Option<Vec<profiles::KindProfile>>,
}

impl Window {
    pub fn label(&self, k: &str) -> &str {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// A service name as backends take it: [A-Za-z0-9_./-].
fn service_name(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_./-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "ebrec".into()
    } else {
        s
    }
}

/// Sets the window's bounds (`from_ns`, `until_ns`) as the profiles' time and duration,
/// and gzips them.
fn seal(profiles: &mut [profiles::KindProfile], p: &Pending) -> Result<()> {
    for kp in profiles {
        kp.profile.time_nanos = p.from_ns as i64;
        kp.profile.duration_nanos = p.until_ns.saturating_sub(p.from_ns) as i64;
        kp.gz.clear();
        ebtrace_analyze::pprof::write_gz(&kp.profile, &mut kp.gz)?;
    }
    Ok(())
}

fn convert(s: &Shared, p: &Pending) -> Result<Window> {
    let (info, mut profiles) = profiles::window_profiles(
        &p.path,
        &profiles::Options {
            symbolize: s.cfg.symbolize,
            debug_dirs: s.cfg.debug_dirs.clone(),
            symbols_only: false,
        },
    )?;
    seal(&mut profiles, p)?;
    // Pyroscope does not symbolize native frames: it gets names from the symbol tables.
    let pyroscope = s.backends.iter().any(|b| b.endpoint.api == Api::Pyroscope);
    let named = if pyroscope && !info.symbolized {
        let (_, mut named) = profiles::window_profiles(
            &p.path,
            &profiles::Options {
                symbols_only: true,
                ..Default::default()
            },
        )?;
        seal(&mut named, p)?;
        Some(named)
    } else {
        None
    };
    let service = service_name(
        s.cfg
            .service
            .as_deref()
            .filter(|x| !x.is_empty())
            .unwrap_or(if info.top_comm.is_empty() {
                "ebrec"
            } else {
                &info.top_comm
            }),
    );
    let host = if info.hostname.is_empty() {
        s.host.clone()
    } else {
        info.hostname.clone()
    };
    let kernel = if info.kernel_release.is_empty() {
        s.kernel.clone()
    } else {
        info.kernel_release.clone()
    };
    let mut labels = vec![
        ("service_name".to_string(), service.clone()),
        ("host".to_string(), host),
        ("kernel".to_string(), kernel),
    ];
    for (k, v) in &s.cfg.labels {
        labels.retain(|(n, _)| n != k);
        labels.push((k.clone(), v.clone()));
    }
    Ok(Window {
        from_ns: p.from_ns,
        until_ns: p.until_ns,
        service,
        labels,
        info,
        profiles,
        named,
    })
}

/// Lowers the calling thread's priority (nice 10): converting must not compete with the
/// recording thread.
fn lower_priority() {
    // SAFETY: gettid and setpriority take plain integers.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

fn convert_loop(s: &Shared) {
    lower_priority();
    loop {
        let p = {
            let mut c = lock(&s.conv);
            loop {
                if !c.discard.is_empty() {
                    let d = std::mem::take(&mut c.discard);
                    drop(c);
                    drop(d);
                    c = lock(&s.conv);
                    continue;
                }
                if c.abort {
                    break None;
                }
                if let Some(p) = c.queue.pop_front() {
                    break Some(p);
                }
                if c.closing {
                    break None;
                }
                c = s.conv_wake.wait(c).unwrap_or_else(|e| e.into_inner());
            }
        };
        let Some(p) = p else { break };
        match convert(s, &p) {
            Ok(w) => {
                for b in &s.backends {
                    let reqs = match b.endpoint.api {
                        Api::Pyroscope => pyroscope::requests(&w),
                        Api::Parca => parca::requests(&w),
                        Api::Otlp => otlp::requests(&w),
                    };
                    enqueue(s, b, &w, reqs, &p.done);
                }
            }
            Err(e) => {
                let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
                let msg = format!("window {}: {}", p.path.display(), chain.join(": "));
                if s.options.print_drops {
                    eprintln!("ebrec: push: {msg}");
                }
                let mut c = lock(&s.conv);
                c.failed += 1;
                c.first_error.get_or_insert(msg);
            }
        }
        drop(p);
    }
    lock(&s.conv).exited = true;
    s.conv_wake.notify_all();
}

fn enqueue(s: &Shared, b: &Backend, w: &Window, reqs: Vec<Request>, done: &Arc<Done>) {
    if reqs.is_empty() {
        return;
    }
    // Two minutes of windows at most (by count), and max_queue_bytes.
    let secs = (w.until_ns.saturating_sub(w.from_ns) / 1_000_000_000).max(1);
    let per_minute = 60u64.div_ceil(secs) as usize;
    let max_items = (2 * per_minute * reqs.len()).max(8);
    let mut dropped = Vec::new();
    {
        let mut st = lock(&b.state);
        st.max_items = max_items;
        for req in reqs {
            st.bytes += req.body.len();
            st.queue.push_back(Item {
                req,
                _done: done.clone(),
            });
        }
        while st.queue.len() > st.max_items
            || (st.bytes > s.options.max_queue_bytes && st.queue.len() > 1)
        {
            let Some(old) = st.queue.pop_front() else {
                break;
            };
            st.bytes -= old.req.body.len();
            st.stats.dropped += 1;
            if st.first_drop.is_none() {
                st.first_drop = Some("queue full: the backend is too slow or down".into());
            }
            dropped.push(old);
        }
    }
    b.wake.notify_all();
    drop(dropped);
}

/// A small xorshift for the backoff's jitter.
fn jitter(seed: &mut u64) -> f64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 11) as f64 / (1u64 << 53) as f64
}

fn send_loop(s: &Shared, b: &Backend) {
    let agent = http_agent(&s.options);
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    'items: loop {
        let item = {
            let mut st = lock(&b.state);
            loop {
                if st.abort {
                    break None;
                }
                if let Some(i) = st.queue.pop_front() {
                    st.bytes -= i.req.body.len();
                    break Some(i);
                }
                if st.closing {
                    break None;
                }
                st = b.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        let Some(item) = item else { break };
        let mut attempt = 0u32;
        let mut backoff = s.options.first_backoff;
        loop {
            attempt += 1;
            let t = Instant::now();
            let outcome = match send(&agent, &b.endpoint, &s.auth, &item.req) {
                Ok(reply) => match b.endpoint.api {
                    Api::Pyroscope => pyroscope::judge(&reply),
                    Api::Parca => parca::judge(&reply),
                    Api::Otlp => otlp::judge(&reply),
                },
                Err(e) => Outcome::Retry(e),
            };
            let mut st = lock(&b.state);
            match outcome {
                Outcome::Pushed => {
                    st.stats.pushed += 1;
                    st.stats.last_latency_ms = t.elapsed().as_millis() as u64;
                    continue 'items;
                }
                Outcome::Drop(why) => {
                    st.stats.failed += 1;
                    st.stats.dropped += 1;
                    let why = format!("{}: {why}", item.req.what);
                    st.stats.last_error = Some(why.clone());
                    if s.options.print_drops && st.printed.insert(why.clone()) {
                        eprintln!("ebrec: push to {}: dropped {why}", b.endpoint.url);
                    }
                    st.first_drop.get_or_insert(why);
                    continue 'items;
                }
                Outcome::Retry(why) => {
                    st.stats.failed += 1;
                    st.stats.last_error = Some(why.clone());
                    if s.options.max_attempts.is_some_and(|m| attempt >= m) {
                        st.stats.dropped += 1;
                        let why = format!("{}: {why} ({attempt} attempts)", item.req.what);
                        if s.options.print_drops && st.printed.insert(why.clone()) {
                            eprintln!("ebrec: push to {}: dropped {why}", b.endpoint.url);
                        }
                        st.first_drop.get_or_insert(why);
                        continue 'items;
                    }
                    if s.options.print_drops && st.printed.insert(why.clone()) {
                        eprintln!("ebrec: push to {}: {why} (retrying)", b.endpoint.url);
                    }
                    // Backoff with ±25% jitter, cut short by an abort.
                    let d = backoff.mul_f64(0.75 + 0.5 * jitter(&mut seed));
                    backoff = (backoff * 2).min(s.options.max_backoff);
                    let end = Instant::now() + d;
                    while !st.abort {
                        let now = Instant::now();
                        if now >= end {
                            break;
                        }
                        st = b
                            .wake
                            .wait_timeout(st, end - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    if st.abort {
                        st.stats.dropped += 1;
                        continue 'items;
                    }
                }
            }
        }
    }
    lock(&b.state).exited = true;
    b.wake.notify_all();
}

/// What the pushed profiles carry and how they are sent: the flags `ebrec agent` and `ebrec
/// push` share (besides --push, which only `ebrec push` requires).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ProfileFlags {
    /// The service name of the pushed profiles (default: the comm of the window's busiest
    /// process).
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME"))]
    pub service: Option<String>,
    /// A file with the push credentials and headers (never on the command line: it shows in
    /// ps). Lines `basic USER:PASSWORD`, `bearer TOKEN`, `tenant ID` (X-Scope-OrgID),
    /// `header NAME: VALUE`.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub auth_file: Option<PathBuf>,
    /// A label of every pushed profile, beside service_name, host and kernel (e.g.
    /// env=prod, region=eu-west-1). Repeatable.
    #[cfg_attr(feature = "cli", arg(long = "label", value_name = "K=V", value_parser = parse_label))]
    pub labels: Vec<(String, String)>,
    /// Symbolize on this host before pushing, with DWARF (default: profiles go to Parca
    /// and OTLP with build-ids and mappings, and the backend symbolizes; to Pyroscope, which
    /// does not symbolize native frames, named from the binaries' ELF symbol tables, their
    /// addresses and build-ids kept).
    #[cfg_attr(feature = "cli", arg(long))]
    pub symbolize: bool,
    /// Debug files for --symbolize (as ebsym's --debug-dir). Repeatable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", requires = "symbolize"))]
    pub debug_dir: Vec<PathBuf>,
}

impl ProfileFlags {
    /// The pusher's configuration for `urls`.
    pub fn config(&self, urls: &[String]) -> PushConfig {
        PushConfig {
            urls: urls.to_vec(),
            service: self.service.clone(),
            auth_file: self.auth_file.clone(),
            symbolize: self.symbolize,
            debug_dirs: self.debug_dir.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// `ebrec push`: one trace pushed as the agent pushes a window.
#[derive(Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct PushArgs {
    /// The trace (raw, as `ebrec record` wrote it; or symbolized).
    pub trace: PathBuf,
    /// Where: pyroscope+http(s)://HOST:PORT, parca+http(s)://HOST:PORT,
    /// otlp+http(s)://HOST:PORT. Repeatable.
    #[cfg_attr(
        feature = "cli",
        arg(long = "push", value_name = "URL", required = true)
    )]
    pub push: Vec<String>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub profile: ProfileFlags,
    /// Seconds one request may take (connecting: 5 at most).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "SECS", default_value_t = 30.0)
    )]
    pub timeout: f64,
    /// Attempts per request (with 1 s, 2 s, 4 s… between them).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 4))]
    pub attempts: u32,
    /// Print the stats as JSON on stdout.
    #[cfg_attr(feature = "cli", arg(long))]
    pub json: bool,
}

/// `--label K=V`: a Prometheus label name and its value.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("--label wants K=V")?;
    if !valid_label_name(k) {
        return Err(format!("label name {k:?} is not [A-Za-z_][A-Za-z0-9_]*"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Realtime ns bounds of a trace: its header's start, and the start plus its last event's
/// boottime distance.
pub(crate) fn trace_bounds(path: &Path) -> Result<(u64, u64)> {
    let mut r = ebtrace_format::TraceReader::open(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut header = None;
    let mut last = 0u64;
    let mut end_real = 0u64;
    for rec in r.by_ref() {
        use ebtrace_format::proto::record::Kind;
        match &rec.kind {
            Some(Kind::Header(h)) => header = Some(h.clone()),
            Some(Kind::Trailer(t)) => {
                last = last.max(t.end_time_ns);
                end_real = t.end_realtime_ns;
            }
            _ => {}
        }
    }
    let h = header.with_context(|| format!("{}: no header", path.display()))?;
    let from = h.start_realtime_ns;
    let until = if end_real > from {
        end_real
    } else {
        from + last.saturating_sub(h.start_time_ns)
    };
    Ok((from, until.max(from + 1_000_000_000)))
}

pub fn run(a: PushArgs) -> Result<()> {
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!("--timeout must be positive");
    }
    let cfg = a.profile.config(&a.push);
    let request_timeout = Duration::from_secs_f64(a.timeout);
    let options = PushOptions {
        max_attempts: Some(a.attempts.max(1)),
        request_timeout,
        connect_timeout: request_timeout.min(Duration::from_secs(5)),
        print_drops: false,
        ..Default::default()
    };
    let (from, until) = trace_bounds(&a.trace)?;
    let pusher = Pusher::with_options(cfg, None, options)?;
    pusher.window(a.trace.clone(), from, until, Box::new(|| {}));
    // Enough for every attempt of every request to time out, and the backoffs.
    let per_request = request_timeout.as_secs_f64() * f64::from(a.attempts.max(1))
        + 2f64.powi(a.attempts.min(7) as i32);
    let (stats, err) = pusher.finish(Duration::from_secs_f64(per_request * 12.0 + 60.0));
    if a.json {
        println!("{}", stats_json(&stats));
    } else {
        for b in &stats.backends {
            eprintln!(
                "ebrec: {}: {} pushed, {} failed attempts, {} dropped",
                b.url, b.pushed, b.failed, b.dropped
            );
        }
    }
    if let Some(e) = err {
        bail!("{e}");
    }
    if stats.backends.iter().all(|b| b.pushed == 0) {
        bail!(
            "{}: nothing to push (no events with stacks)",
            a.trace.display()
        );
    }
    Ok(())
}

fn stats_json(s: &PushStats) -> String {
    serde_json::json!({
        "windows": s.windows,
        "windows_dropped": s.windows_dropped,
        "windows_failed": s.windows_failed,
        "backends": s.backends.iter().map(|b| serde_json::json!({
            "url": b.url,
            "backend": b.backend,
            "pushed": b.pushed,
            "failed": b.failed,
            "dropped": b.dropped,
            "queued": b.queued,
            "last_latency_ms": b.last_latency_ms,
            "last_error": b.last_error,
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why() {
        let e = Endpoint::parse("pyroscope+http://127.0.0.1:4040").unwrap();
        assert_eq!(
            (e.api, e.base.as_str()),
            (Api::Pyroscope, "http://127.0.0.1:4040")
        );
        let e = Endpoint::parse("otlp+https://h:4318/otel/").unwrap();
        assert_eq!(e.base, "https://h:4318/otel");
        for bad in [
            "http://h:1",
            "zipkin+http://h:1",
            "parca+ftp://h:1",
            "parca+http://",
            "parca+http://u:p@h:1",
            "parca+http://h:x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    fn dead_pusher(max_attempts: Option<u32>) -> Pusher {
        // Port 1 on loopback: nothing listens (connection refused at once).
        Pusher::with_options(
            PushConfig {
                urls: vec!["pyroscope+http://127.0.0.1:1".into()],
                ..Default::default()
            },
            None,
            PushOptions {
                max_attempts,
                print_drops: false,
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// window() returns at once whatever the backend does, every `done` runs (on another
    /// thread), and shutdown keeps to its deadline.
    #[test]
    fn window_never_blocks_and_done_always_runs() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let p = dead_pusher(None);
        let done = Arc::new(AtomicUsize::new(0));
        let me = std::thread::current().id();
        let t = Instant::now();
        for i in 0..50 {
            let d = done.clone();
            p.window(
                PathBuf::from(format!("/nonexistent/w{i}.pb.zst")),
                0,
                10_000_000_000,
                Box::new(move || {
                    assert_ne!(std::thread::current().id(), me);
                    d.fetch_add(1, Ordering::SeqCst);
                }),
            );
        }
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        let t = Instant::now();
        let (stats, err) = p.finish(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(6));
        assert_eq!(done.load(Ordering::SeqCst), 50);
        assert_eq!(stats.windows, 50);
        assert_eq!(
            stats.windows_dropped + stats.windows_failed,
            50,
            "{stats:?}"
        );
        assert!(err.unwrap().contains("/nonexistent/"));
    }

    /// A dead backend's queue stays within its bytes; what is pushed out is counted and let
    /// go of (the window's `done` runs once the last of its requests is gone).
    #[test]
    fn a_dead_backend_holds_bounded_memory() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let p = dead_pusher(None);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let done = Arc::new(Done(Mutex::new(Some(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })))));
        let w = Window {
            from_ns: 0,
            until_ns: 10_000_000_000,
            service: "s".into(),
            labels: Vec::new(),
            info: Default::default(),
            profiles: Vec::new(),
            named: None,
        };
        let reqs: Vec<Request> = (0..100)
            .map(|i| Request {
                what: format!("r{i}"),
                path: "/ingest".into(),
                content_type: "application/octet-stream".into(),
                headers: Vec::new(),
                body: vec![0; 1 << 20],
            })
            .collect();
        enqueue(&p.shared, &p.shared.backends[0], &w, reqs, &done);
        drop(done);
        let st = p.stats();
        let b = &st.backends[0];
        assert!(b.queued_bytes <= 64 << 20, "{b:?}");
        assert!(b.dropped >= 36, "{b:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "requests are left");
        let (st, _) = p.finish(Duration::from_millis(300));
        let b = &st.backends[0];
        assert_eq!(b.queued, 0);
        // All 100 accounted for: dropped, or the one in flight when the deadline came.
        assert!(b.dropped >= 99, "{b:?}");
        assert!(b.failed >= 1, "{b:?}");
    }

    #[test]
    fn auth_lines() {
        let h = parse_auth(
            "# c\nbasic u:p\nbearer T\ntenant t1\nheader X-A: b c\n",
            "f",
        )
        .unwrap();
        assert_eq!(h[0], ("Authorization".into(), "Basic dTpw".into()));
        assert_eq!(h[1].1, "Bearer T");
        assert_eq!(h[2], ("X-Scope-OrgID".into(), "t1".into()));
        assert_eq!(h[3], ("X-A".into(), "b c".into()));
        let e = parse_auth("bearer x\npassword y\n", "f").unwrap_err();
        assert!(e.to_string().starts_with("f:2: unknown line"), "{e}");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b"a"), "YQ==");
    }
}
