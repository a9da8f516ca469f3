//! packaging/ebrec-agent.service: systemd accepts the unit, and its capability set is enough:
//! the agent run as an unprivileged user (nobody) with exactly the unit's capabilities records
//! a root-owned testdata program's off-CPU blocks, named. Needs root to set that up (skips
//! loudly without it; fails when CI=true).
//!
//! packaging/kubernetes/ebrec-agent.yaml: valid against Kubernetes' schemas, and its
//! container's capabilities are enough to record as uid 0 with only them.
//!
//! The Debian packages (scripts/package-deb): built, installed with `dpkg -i`, run (`ebrec
//! doctor`, a recording, `ebsym` on it, the man pages and completions where the system
//! looks), then purged, leaving nothing. Needs root too.

use crate::common;
use common::{ebsym_json, root};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

fn unit() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/ebrec-agent.service");
    std::fs::read_to_string(p).unwrap()
}

fn values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

#[test]
fn systemd_accepts_the_unit() {
    let u = unit();
    let ambient = values(&u, "AmbientCapabilities");
    assert_eq!(ambient, values(&u, "CapabilityBoundingSet"));
    assert!(
        ambient.contains(&"CAP_BPF".to_string()) && ambient.contains(&"CAP_PERFMON".to_string())
    );
    assert!(
        !ambient.contains(&"CAP_SYS_ADMIN".to_string()),
        "the unit grants CAP_SYS_ADMIN"
    );
    assert_eq!(values(&u, "DynamicUser"), ["yes"]);
    let Ok(sa) = which("systemd-analyze") else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("systemd-analyze is missing and CI=true");
        }
        eprintln!("\n*** SKIPPED: no systemd-analyze to verify the unit ***\n");
        return;
    };
    // The unit as installed, with ExecStart on this build's ebrec.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ebrec-agent.service");
    std::fs::write(
        &copy,
        u.replace("/usr/local/bin/ebrec", env!("CARGO_BIN_EXE_ebrec")),
    )
    .unwrap();
    let out = Command::new(sa).arg("verify").arg(&copy).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let complaints: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("ebrec-agent.service"))
        .collect();
    assert!(out.status.success() && complaints.is_empty(), "{err}");
}

fn which(cmd: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(cmd))
                .find(|c| c.is_file())
        })
        .ok_or(())
}

#[test]
fn the_units_capabilities_are_enough_as_nobody() {
    if !root() {
        return;
    }
    let caps = values(&unit(), "AmbientCapabilities");
    assert_eq!(
        agent_naps(65534, &caps),
        4,
        "the program's 4 naps, named, as nobody with the unit's capabilities"
    );
}

/// Runs the agent as `uid` with exactly `caps` (CAP_ names) on a root-owned testdata program
/// for 4 s; the program's naps the trace has, named.
fn agent_naps(uid: u32, caps: &[String]) -> u64 {
    let caps: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let caps = caps.join(",");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // A root-owned target: another user needs the capabilities to see into it.
    let target = common::start_waiting(
        "offcpu_blocks",
        &["--naps", "4", "--ms", "100", "--pingpong", "100"],
    );
    let pid = target.pid;
    let out = dir.path().join("a.pb.zst");
    let mut agent = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "agent",
            "--offcpu=5000",
            "--cpu",
            "--window",
            "1",
            "--duration",
            "4",
        ])
        .args(["-p", &pid.to_string(), "-o", out.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(agent.stderr.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if err.read_line(&mut l).unwrap() == 0 {
            panic!("the agent as uid {uid} with {caps} never recorded: {lines:#?}");
        }
        if l.contains("recording to") {
            break;
        }
        lines.push(l);
    }
    target.go();
    let mut tail = String::new();
    std::io::Read::read_to_string(&mut err, &mut tail).unwrap();
    assert!(agent.wait().unwrap().success(), "{lines:#?}\n{tail}");
    let mut naps = 0;
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let p = e.path();
        let top = ebsym_json(&["top", p.to_str().unwrap(), "--kind", "offcpu", "-n", "1000"]);
        for r in top["rows"].as_array().unwrap() {
            let named = r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"].as_str().unwrap_or("").contains("sleeper_a"));
            if named {
                naps += r["count"].as_u64().unwrap();
            }
        }
    }
    naps
}

fn daemonset() -> String {
    let p = workspace().join("packaging/kubernetes/ebrec-agent.yaml");
    std::fs::read_to_string(p).unwrap()
}

/// The capabilities the DaemonSet's container adds (`- BPF  # why`), as CAP_ names.
fn daemonset_caps(yaml: &str) -> Vec<String> {
    let mut caps = Vec::new();
    let mut in_add = false;
    for l in yaml.lines() {
        let t = l.trim();
        if t == "add:" {
            in_add = true;
        } else if in_add {
            match t.strip_prefix("- ") {
                Some(c) => caps.push(format!("CAP_{}", c.split('#').next().unwrap().trim())),
                None => in_add = false,
            }
        }
    }
    caps
}

/// packaging/kubernetes/ebrec-agent.yaml is valid against Kubernetes' schemas (PyPI's
/// kubernetes-validate, strict: an unknown field fails), for an old and the newest release
/// it knows, and asks for no more than it says: the unit's capabilities but CAP_IPC_LOCK
/// (locked memory matters only before 5.11), no CAP_SYS_ADMIN, not privileged.
#[test]
fn the_daemonset_is_valid_kubernetes_and_minimal() {
    let yaml = daemonset();
    let caps = daemonset_caps(&yaml);
    let unit_caps: Vec<String> = values(&unit(), "AmbientCapabilities")
        .into_iter()
        .filter(|c| c != "CAP_IPC_LOCK")
        .collect();
    assert_eq!(caps, unit_caps, "the DaemonSet's capabilities");
    for line in [
        "hostPID: true",
        "privileged: false",
        "allowPrivilegeEscalation: false",
        "readOnlyRootFilesystem: true",
        "drop: [\"ALL\"]",
        "automountServiceAccountToken: false",
    ] {
        assert!(yaml.contains(line), "the DaemonSet does not say {line}");
    }
    // Not in the manifest (its comments may say why not).
    let fields: String = yaml
        .lines()
        .map(|l| l.split('#').next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    for absent in ["SYS_ADMIN", "hostNetwork", "privileged: true"] {
        assert!(!fields.contains(absent), "the DaemonSet asks for {absent}");
    }
    let have = Command::new("python3")
        .args(["-c", "import kubernetes_validate"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("kubernetes-validate is missing and CI=true (scripts/setup test installs it)");
        }
        eprintln!("\n*** SKIPPED: no kubernetes-validate (pip install kubernetes-validate) ***\n");
        return;
    }
    let file = workspace().join("packaging/kubernetes/ebrec-agent.yaml");
    for version in ["1.28.0", "1.37.0"] {
        let out = Command::new("python3")
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .arg(&file)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kubernetes {version}: {text}");
        assert_eq!(
            text.matches("passed for resource").count(),
            2,
            "the Namespace and the DaemonSet, against {version}: {text}"
        );
    }
}

/// The DaemonSet's container runs ebrec as uid 0 with only its capabilities: that is enough
/// to record another process's off-CPU blocks, named (hostPID is this test's own namespace).
#[test]
fn the_daemonsets_capabilities_are_enough() {
    if !root() {
        return;
    }
    let caps = daemonset_caps(&daemonset());
    assert_eq!(agent_naps(0, &caps), 4, "as uid 0 with {caps:?} only");
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Purges the packages when the test ends, passed or not.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "ebrec", "ebsym"])
            .output();
    }
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_debian_packages_install_run_and_purge() {
    if !root() {
        return;
    }
    for p in ["ebrec", "ebsym"] {
        assert!(
            !installed(p),
            "the package {p} is installed on this machine: this test installs and purges its own, \
             so it will not run over it (dpkg --purge {p} first)"
        );
    }
    // The build: the release profile, shared with scripts/demo (built once in scripts/test).
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let built = ok(Command::new(workspace().join("scripts/package-deb")).arg(dir.path()));
    eprintln!("scripts/package-deb: {:.1} s", t.elapsed().as_secs_f64());
    let debs: Vec<&str> = built.lines().collect();
    assert_eq!(debs.len(), 2, "{built}");
    let t = std::time::Instant::now();

    // What each holds, before it is installed.
    let contents = |deb: &str| ok(Command::new("dpkg-deb").args(["-c", deb]));
    let ebrec_files = contents(debs[0]);
    for f in [
        "./usr/bin/ebrec",
        "./usr/lib/systemd/system/ebrec-agent.service",
        "./etc/ebrec/agent.env",
        "./usr/share/man/man1/ebrec.1.gz",
        "./usr/share/man/man1/ebrec-record.1.gz",
        "./usr/share/bash-completion/completions/ebrec",
        "./usr/share/zsh/vendor-completions/_ebrec",
        "./usr/share/fish/vendor_completions.d/ebrec.fish",
    ] {
        assert!(
            ebrec_files.contains(f),
            "{} has no {f}:\n{ebrec_files}",
            debs[0]
        );
    }
    let ebsym_files = contents(debs[1]);
    for f in [
        "./usr/bin/ebsym",
        "./usr/share/man/man1/ebsym-top.1.gz",
        "./usr/share/bash-completion/completions/ebsym",
    ] {
        assert!(
            ebsym_files.contains(f),
            "{} has no {f}:\n{ebsym_files}",
            debs[1]
        );
    }

    let _purge = Purge;
    ok(Command::new("dpkg").arg("-i").args(&debs));
    let files: Vec<String> = ok(Command::new("dpkg").args(["-L", "ebrec", "ebsym"]))
        .lines()
        .map(str::to_string)
        .collect();

    // The installed unit runs the installed binary, and systemd accepts it.
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/ebrec-agent.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/ebrec agent "), "{unit}");
    assert!(
        unit.contains("EnvironmentFile=-/etc/ebrec/agent.env"),
        "{unit}"
    );
    if let Ok(sa) = which("systemd-analyze") {
        let out = Command::new(sa)
            .args(["verify", "/usr/lib/systemd/system/ebrec-agent.service"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.lines().any(|l| l.contains("ebrec-agent.service")),
            "{err}"
        );
    }

    // ebrec doctor, from the package.
    let doctor = ok(Command::new("/usr/bin/ebrec").arg("doctor"));
    assert!(doctor.contains("ok    privileges"), "{doctor}");

    // A short recording of a real program, symbolized and reported by the packaged ebsym.
    let exe =
        ebtrace_testdata::build("offcpu_blocks", ebtrace_testdata::Variant::FramePointer).unwrap();
    let work = tempfile::tempdir().unwrap();
    let trace = work.path().join("t.pb.zst");
    ok(Command::new("/usr/bin/ebrec")
        .args(["record", "-q", "--offcpu=5000", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .args(["--naps", "4", "--ms", "100", "--pingpong", "100"]));
    ok(Command::new("/usr/bin/ebsym").arg(&trace));
    let sym = work.path().join("t.sym.pb.zst");
    let top: serde_json::Value = serde_json::from_str(&ok(Command::new("/usr/bin/ebsym")
        .args(["top", "--kind", "offcpu", "-n", "1000", "--json"])
        .arg(&sym)))
    .unwrap();
    let naps: u64 = top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"].as_str().unwrap_or("").contains("sleeper_a"))
        })
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        naps, 4,
        "the program's 4 naps, named by the packaged ebsym: {top}"
    );

    // The man pages and completions are where man and the shells look.
    assert!(Path::new("/usr/share/man/man1/ebsym-leaks.1.gz").exists());
    let out = Command::new("bash")
        .args([
            "-c",
            "source /usr/share/bash-completion/completions/ebsym; COMP_WORDS=(ebsym lea); \
             COMP_CWORD=1; _ebsym ebsym lea ebsym; echo \"${COMPREPLY[@]}\"",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "leaks");
    // fish completes from its vendor directory by itself; zsh's compinit finds `_ebsym` by
    // its #compdef line in the vendor directory on its default fpath.
    let fish = Command::new("fish")
        .args([
            "-c",
            "complete -C 'ebsym lea'; complete -C 'ebrec record --stack-m'",
        ])
        .output()
        .unwrap();
    let fish = String::from_utf8_lossy(&fish.stdout);
    assert!(
        fish.lines().any(|l| l.starts_with("leaks"))
            && fish.lines().any(|l| l.starts_with("--stack-mode")),
        "fish: {fish}"
    );
    let zsh = Command::new("zsh")
        .args([
            "-c",
            "zsh -n /usr/share/zsh/vendor-completions/_ebrec && autoload -Uz compinit && \
             compinit -D -u && print -r -- $_comps[ebsym] $_comps[ebrec]",
        ])
        .output()
        .unwrap();
    // (compinit -D: no dump file; `-d /dev/null` once made zsh move its dump over /dev/null.)
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &std::fs::metadata("/dev/null").unwrap().file_type()
    ));
    assert_eq!(
        String::from_utf8_lossy(&zsh.stdout).trim(),
        "_ebsym _ebrec",
        "zsh: {}",
        String::from_utf8_lossy(&zsh.stderr)
    );

    // Removed: the programs go, the configuration file stays (a conffile) until the purge.
    ok(Command::new("dpkg").args(["-r", "ebrec", "ebsym"]));
    assert!(!Path::new("/usr/bin/ebrec").exists() && !Path::new("/usr/bin/ebsym").exists());
    assert!(Path::new("/etc/ebrec/agent.env").exists());
    // Purged: nothing of either package is left, the configuration included.
    ok(Command::new("dpkg").args(["--purge", "ebrec", "ebsym"]));
    assert!(!installed("ebrec") && !installed("ebsym"));
    let left: Vec<&String> = files
        .iter()
        .filter(|f| {
            let p = Path::new(f.as_str());
            // Directories the system shares (/usr/bin, /etc, …, and ones another package
            // owns: fish's vendor_completions.d) stay; the packages' own go.
            let owned_by_another = || {
                Command::new("dpkg-query")
                    .args(["-S", f.as_str()])
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            p.exists()
                && !(p.is_dir()
                    && (std::fs::read_dir(p).unwrap().next().is_some() || owned_by_another()))
        })
        .collect();
    assert!(left.is_empty(), "left after dpkg --purge: {left:?}");
    for gone in ["/etc/ebrec", "/var/lib/ebrec", "/usr/share/doc/ebrec"] {
        assert!(
            !Path::new(gone).exists(),
            "{gone} is left after dpkg --purge"
        );
    }
    eprintln!("installed, ran, purged: {:.1} s", t.elapsed().as_secs_f64());
}
