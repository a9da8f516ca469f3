//! Compiles `trace.proto` with protox (a pure-Rust protobuf compiler), so the build needs no
//! `protoc` binary, then generates Rust types with prost-build.
fn main() {
    println!("cargo:rerun-if-changed=trace.proto");
    let fds = protox::compile(["trace.proto"], ["."]).expect("trace.proto does not compile");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build failed on trace.proto");
}
