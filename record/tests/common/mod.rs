//! Helpers shared by ebrec's integration tests.
#![allow(dead_code)]
use serde_json::Value;
use std::process::Output;

/// Whether the test can run: root is needed for eBPF. Without it the test is skipped
/// loudly, or fails when CI=true.
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("this test needs root (eBPF), and CI=true: failing instead of skipping");
    }
    eprintln!("\n*** SKIPPED: needs root for eBPF (run the tests as root) ***\n");
    false
}

/// The EXPECT line a testdata program printed, for `program`.
pub fn expect_line(out: &Output, program: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["program"] == program);
    line.unwrap_or_else(|| {
        panic!(
            "no EXPECT line of {program}; stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
