//! ebsym's progress bars on stderr, drawn for what the library reports
//! ([`ebtrace_symbolize::progress::Progress`]): the resolution of a trace's addresses and
//! debuginfod downloads. Nothing goes to stdout, and nothing is drawn when stderr is not
//! a terminal.
use ebtrace_symbolize::progress::{Download, Progress};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a resolution runs before its progress bar appears.
const RESOLVE_DELAY: Duration = Duration::from_secs(1);

/// The bar of the resolution: drawn only when stderr is a terminal and only once the run
/// has taken [`RESOLVE_DELAY`] (or `EBSYM_PROGRESS_DELAY_MS` milliseconds), so short runs
/// and pipes see nothing.
#[derive(Debug, Default)]
pub struct Resolving {
    bar: Mutex<Option<ResolveBar>>,
}

#[derive(Debug)]
struct ResolveBar {
    bar: indicatif::ProgressBar,
    start: Instant,
    delay: Duration,
    shown: AtomicBool,
}

impl Progress for Resolving {
    fn resolve_start(&self, total: u64) {
        let delay = std::env::var("EBSYM_PROGRESS_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(RESOLVE_DELAY);
        let style = indicatif::ProgressStyle::with_template(
            "ebsym: resolving {bar:30} {human_pos}/{human_len} addresses, {per_sec}, {eta} left",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::hidden(),
        )
        .with_style(style);
        *self.bar.lock().unwrap() = Some(ResolveBar {
            bar,
            start: Instant::now(),
            delay,
            shown: AtomicBool::new(false),
        });
    }

    fn resolved(&self, n: u64) {
        use std::io::IsTerminal;
        let guard = self.bar.lock().unwrap();
        let Some(b) = guard.as_ref() else {
            return;
        };
        b.bar.inc(n);
        if b.start.elapsed() >= b.delay
            && !b.shown.swap(true, Ordering::Relaxed)
            && std::io::stderr().is_terminal()
        {
            b.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }

    fn resolve_done(&self) {
        if let Some(b) = self.bar.lock().unwrap().take() {
            b.bar.finish_and_clear();
        }
    }
}

/// The bars of debuginfod downloads, one per download, together on stderr.
#[derive(Debug)]
pub struct Downloads {
    bars: indicatif::MultiProgress,
}

impl Default for Downloads {
    fn default() -> Self {
        Downloads {
            bars: indicatif::MultiProgress::with_draw_target(
                indicatif::ProgressDrawTarget::stderr(),
            ),
        }
    }
}

struct DownloadBar(indicatif::ProgressBar);

impl Download for DownloadBar {
    fn position(&self, bytes: u64) {
        self.0.set_position(bytes);
    }

    fn done(&self) {
        self.0.finish_and_clear();
    }
}

impl Progress for Downloads {
    fn download(&self, url: &str, len: Option<u64>) -> Box<dyn Download> {
        let b = match len {
            Some(l) => indicatif::ProgressBar::new(l).with_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            ),
            None => indicatif::ProgressBar::new_spinner().with_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            ),
        };
        let b = self.bars.add(b);
        b.set_message(format!("ebsym: downloading {url}"));
        Box::new(DownloadBar(b))
    }
}
