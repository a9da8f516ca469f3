//! Compiles `trace.proto` (and `profile.proto`, Google's pprof schema, for `ebsym pprof`)
//! with protox (a pure-Rust protobuf compiler), so the build needs no `protoc` binary, then
//! generates Rust types with prost-build.
fn main() {
    println!("cargo:rerun-if-changed=trace.proto");
    println!("cargo:rerun-if-changed=profile.proto");
    let fds = protox::compile(["trace.proto", "profile.proto"], ["."])
        .expect("trace.proto or profile.proto does not compile");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build failed on trace.proto or profile.proto");
}
