fn main() {
    eprintln!("ebrec: not built yet");
    std::process::exit(2)
}
