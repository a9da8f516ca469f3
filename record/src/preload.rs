//! `--alloc-sampler preload`: the allocation sampler that runs inside the target
//! (bpf/preload.c, built and embedded by ebtrace-bpf). ebrec writes it to a private
//! temporary directory, removed when ebrec exits, and starts the command with it first in
//! LD_PRELOAD and the period in its environment; `probes::Probes::attach_sampler` puts the
//! uprobes on its probe sites.
use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The shim, compiled by build.rs.
use ebtrace_bpf::PRELOAD_SHIM as SHIM;

/// The default `--sample-bytes`: tcmalloc's default sampling period, 512 KiB.
pub const DEFAULT_PERIOD: u64 = 512 << 10;

/// The shim written out; the file and its directory go when this is dropped.
#[derive(Debug)]
pub struct Shim {
    dir: PathBuf,
    pub path: PathBuf,
}

impl Shim {
    /// Writes the shim into a fresh directory under $TMPDIR (else /tmp). The directory and
    /// file are readable by all (0755), so that a child that drops its privileges before an
    /// exec still loads it; the name is random, and the file is ebrec's own code, no secret.
    pub fn write() -> Result<Shim> {
        let base = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && !d.as_os_str().as_bytes().contains(&b' '))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let mut template = base
            .join("ebrec-preload.XXXXXX")
            .into_os_string()
            .into_vec();
        template.push(0);
        // SAFETY: template is a NUL-terminated buffer mkdtemp rewrites in place.
        let r = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if r.is_null() {
            bail!(
                "cannot create a directory for the sampler shim in {}: {}",
                base.display(),
                std::io::Error::last_os_error()
            );
        }
        template.pop();
        let dir = PathBuf::from(OsString::from_vec(template));
        let path = dir.join("libebtrace-preload.so");
        let shim = Shim {
            dir: dir.clone(),
            path: path.clone(),
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, SHIM)
            .with_context(|| format!("writing the sampler shim {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(shim)
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The descriptor number a launched command finds `targets::Launched::release_with`'s
/// descriptor at (the preload shim's view of the sampler's ring buffer: `EBTRACE_RING_FD`).
pub const RELEASED_FD: i32 = 1017;

/// The environment the command gets on top of ebrec's: the shim first in LD_PRELOAD (the
/// entries already there kept after it), the period, --alloc's threshold and --no-free.
/// An LD_PRELOAD entry that is itself an allocator is refused: the shim forwards to glibc's
/// malloc, so it would replace that allocator, not sample it.
pub fn child_env(
    shim: &Path,
    period: u64,
    min: u64,
    no_free: bool,
    ring_bytes: u32,
) -> Result<Vec<(OsString, OsString)>> {
    let mut preload = shim.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        for entry in old
            .as_bytes()
            .split(|&b| b == b':' || b == b' ')
            .filter(|e| !e.is_empty())
        {
            let p = Path::new(OsStr::from_bytes(entry));
            let allocator = ebtrace_elf::Symbols::read(p)
                .ok()
                .is_some_and(|s| s.function("malloc").is_some());
            if allocator {
                bail!(
                    "LD_PRELOAD has an allocator ({}): --alloc-sampler preload forwards to glibc's \
                     malloc and would replace it; use --alloc-sampler uprobe --alloc-lib {}",
                    p.display(),
                    p.display()
                );
            }
        }
        if !old.is_empty() {
            preload.push(":");
            preload.push(&old);
        }
    }
    let mut env = vec![
        (OsString::from("LD_PRELOAD"), preload),
        (
            OsString::from("EBTRACE_SAMPLE_BYTES"),
            period.to_string().into(),
        ),
        (OsString::from("EBTRACE_MIN_BYTES"), min.to_string().into()),
    ];
    if no_free {
        env.push((OsString::from("EBTRACE_NO_FREE"), OsString::from("1")));
    }
    // The sampler's ring buffer, handed over at release (targets::Launched::release_with):
    // the shim reads its producer and consumer positions and waits while it is half full.
    env.push((
        OsString::from("EBTRACE_RING_FD"),
        RELEASED_FD.to_string().into(),
    ));
    env.push((
        OsString::from("EBTRACE_RING_BYTES"),
        ring_bytes.to_string().into(),
    ));
    Ok(env)
}
