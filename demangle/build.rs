//! Links the C++ runtime's demangler (`__cxa_demangle`, libiberty's cp-demangle inside
//! libstdc++) statically, so that ebrec stays a binary that needs only libc on a server.
//! Only the objects that define the demangler are pulled out of `libstdc++.a`.
fn main() {
    let dir = std::process::Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        .arg("-print-file-name=libstdc++.a")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|p| p.contains('/'))
        .and_then(|p| std::path::Path::new(&p).parent().map(|d| d.to_path_buf()));
    match dir {
        Some(d) => {
            println!("cargo:rustc-link-search=native={}", d.display());
            println!("cargo:rustc-link-lib=static=stdc++");
        }
        // No static libstdc++ (g++ missing): fall back to the shared one.
        None => println!("cargo:rustc-link-lib=dylib=stdc++"),
    }
    println!("cargo:rerun-if-env-changed=CXX");
}
