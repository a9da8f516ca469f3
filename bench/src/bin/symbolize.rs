//! `ebsym addr2line` through the library's batched, parallel path
//! ([`ebtrace_symbolize::addr2line_stream`]), for `bench/scripts/symbolize.sh` (not a test).
//!
//! `symbolize -e BINARY [-f] [-i] [-C] [-a] < addresses`: the same flags and output as
//! binutils `addr2line` reading stdin. Threads: `RAYON_NUM_THREADS`.
use ebtrace_symbolize::binutils::Flags;
use ebtrace_symbolize::{addr2line_stream, Options, Symbolizer};
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut exe = PathBuf::from("a.out");
    let mut flags = Flags::default();
    let mut demangle = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-e" => {
                exe = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("-e needs a file"))?
                    .into()
            }
            "-f" => flags.functions = true,
            "-i" => flags.inlines = true,
            "-a" => flags.addresses = true,
            "-C" => demangle = true,
            "-fiC" | "-fCi" => {
                flags.functions = true;
                flags.inlines = true;
                demangle = true;
            }
            _ => anyhow::bail!("usage: symbolize -e BINARY [-f] [-i] [-C] [-a] < addresses"),
        }
    }
    let sym = Symbolizer::new(Options {
        demangle,
        binutils_names: true,
        ..Default::default()
    });
    let module = sym.open_binary(&exe);
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    addr2line_stream(&module, flags, &mut input, &mut out)?;
    Ok(())
}
