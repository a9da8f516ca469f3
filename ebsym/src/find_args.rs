//! Where ebsym looks for debug files: the options every command that symbolizes takes
//! (`ebsym TRACE`, the reports, `addr2line`), turned into the library's options.
use crate::progress;
use std::path::PathBuf;

/// Where debug files are looked for.
#[derive(clap::Args, Debug, Clone)]
pub struct FindArgs {
    /// A directory of debug files: a `.build-id/xx/rest.debug` tree, or the binaries'
    /// paths mirrored (`DIR/usr/bin/app` or `DIR/usr/bin/app.debug`). Repeatable; searched
    /// first, in order. Example: `--debug-dir ./dbg`
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
    /// Take the recorded paths of binaries under this directory (a copy of the recording
    /// host's or a container's root file system). Example: `--root /srv/rootfs`
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// A debuginfod server, asked last for files not found locally (the debug file, and
    /// the binary when it is missing). Repeatable; default: the space-separated URLs of
    /// `DEBUGINFOD_URLS`. Downloads go to the standard cache (`$DEBUGINFOD_CACHE_PATH`,
    /// else `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`).
    /// Example: `--debuginfod http://127.0.0.1:8002`
    #[arg(long = "debuginfod", value_name = "URL")]
    debuginfod: Vec<String>,
    /// Never ask a debuginfod server (files already in its cache are not used either).
    #[arg(long, conflicts_with = "debuginfod")]
    no_debuginfod: bool,
    /// Seconds one debuginfod download may take, connect to last byte (connecting alone
    /// is given 2 s; a server that fails is not asked again in this run).
    /// Example: `--debuginfod-timeout 120`
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    debuginfod_timeout: f64,
}

impl FindArgs {
    pub fn options(&self, demangle: bool) -> ebtrace_symbolize::Options {
        let mut o = ebtrace_symbolize::Options {
            demangle,
            ..Default::default()
        };
        o.locator.debug_dirs = self.debug_dirs.clone();
        o.locator.root = self.root.clone();
        let urls = if self.no_debuginfod {
            Vec::new()
        } else if !self.debuginfod.is_empty() {
            self.debuginfod.clone()
        } else {
            ebtrace_symbolize::debuginfod::urls_from_env()
        };
        if !urls.is_empty() {
            use ebtrace_symbolize::debuginfod::{Client, Config};
            let mut config = Config::new(urls);
            if self.debuginfod_timeout.is_finite() && self.debuginfod_timeout > 0.0 {
                config.timeout = std::time::Duration::from_secs_f64(self.debuginfod_timeout);
            }
            o.locator.debuginfod = Some(std::sync::Arc::new(Client::with_progress(
                config,
                std::sync::Arc::new(progress::Downloads::default()),
            )));
        }
        o
    }
}
