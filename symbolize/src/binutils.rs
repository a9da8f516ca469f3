//! The output format of binutils' `addr2line`, so that `ebsym addr2line` can replace it in
//! scripts byte for byte.
//!
//! ```
//! use ebtrace_symbolize::binutils::{format, parse_address, Flags};
//! use ebtrace_symbolize::{Reason, Unresolved};
//! let flags = Flags { functions: true, inlines: false, addresses: true };
//! let out = format(parse_address("401234").unwrap(), &Err(Unresolved::from(Reason::NoSymbol)), flags);
//! assert_eq!(out, "0x0000000000401234\n??\n??:0\n");
//! ```
use crate::resolve::{Lookup, Module};
use rayon::prelude::*;
use std::fmt::Write;

/// The flags of binutils `addr2line` that change what is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `-f`: the function name on a line of its own before each location.
    pub functions: bool,
    /// `-i`: also the frames that the address is inlined into, outward.
    pub inlines: bool,
    /// `-a`: the address first, as `0x` and 16 hex digits.
    pub addresses: bool,
}

/// Parses an address as binutils does: hex, with or without `0x`. Surrounding blanks are
/// ignored; anything after the hex digits ends the number (as `strtoul` would).
pub fn parse_address(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let digits: String = s.chars().take_while(char::is_ascii_hexdigit).collect();
    if digits.is_empty() {
        return Some(0);
    }
    // binutils keeps the low 64 bits of an overlong number.
    let tail = &digits[digits.len().saturating_sub(16)..];
    u64::from_str_radix(tail, 16).ok()
}

/// The lines binutils `addr2line` prints for `addr`.
pub fn format(addr: u64, lookup: &Lookup, flags: Flags) -> String {
    let mut out = String::new();
    if flags.addresses {
        let _ = writeln!(out, "0x{addr:016x}");
    }
    match lookup {
        Ok(frames) if !frames.is_empty() => {
            let n = if flags.inlines { frames.len() } else { 1 };
            // binutils keeps the address's discriminator for the whole inline chain.
            let discriminator = frames[0].discriminator;
            for f in &frames[..n] {
                if flags.functions {
                    let name = f.function.as_deref().filter(|s| !s.is_empty());
                    let _ = writeln!(out, "{}", name.unwrap_or("??"));
                }
                let file = f.file.as_deref().unwrap_or("??");
                if f.line != 0 {
                    let _ = write!(out, "{file}:{}", f.line);
                } else {
                    let _ = write!(out, "{file}:?");
                }
                if discriminator != 0 {
                    let _ = write!(out, " (discriminator {discriminator})");
                }
                out.push('\n');
            }
        }
        _ => {
            if flags.functions {
                out.push_str("??\n");
            }
            out.push_str("??:0\n");
        }
    }
    out
}

/// Answers addresses read one per line from `input` in binutils' `addr2line` format, as
/// `ebsym addr2line` does with no address arguments.
///
/// Lines are taken in batches: one line (waiting for it if needed), then every further
/// complete line that `input` already holds in its buffer, without waiting for more. A
/// batch is resolved in parallel ([`Module::resolve_many`]), written in input order and
/// flushed, so a script that writes one address and waits for its answer gets it at
/// once, and a pipe of many addresses fills every core.
pub fn addr2line_stream<R: std::io::Read, W: std::io::Write>(
    module: &Module,
    flags: Flags,
    input: &mut std::io::BufReader<R>,
    out: &mut W,
) -> std::io::Result<()> {
    use std::io::BufRead;
    /// At most this many addresses per batch (bounds the memory of one batch: 16k
    /// addresses cost protoc 14 MiB more than 4k, for 10% less time).
    const BATCH_MAX: usize = 1 << 12;
    let mut line = String::new();
    let mut addrs = Vec::new();
    loop {
        addrs.clear();
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        addrs.push(parse_address(&line).unwrap_or(0));
        while addrs.len() < BATCH_MAX && input.buffer().contains(&b'\n') {
            line.clear();
            input.read_line(&mut line)?;
            addrs.push(parse_address(&line).unwrap_or(0));
        }
        let lookups = module.resolve_many(&addrs);
        let texts: Vec<String> = addrs
            .par_iter()
            .zip(lookups.par_iter())
            .with_min_len(256)
            .map(|(addr, lookup)| format(*addr, lookup, flags))
            .collect();
        // One write per batch: stdout is line-buffered, so a write per answer would be
        // a system call per answer.
        out.write_all(texts.concat().as_bytes())?;
        out.flush()?;
    }
}
