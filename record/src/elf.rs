//! ELF reading is `ebtrace-elf`'s ([`ebtrace_elf::Elf`]: the one reader of ebrec and ebsym,
//! fuzzed): build-ids, function symbols, sections, load segments, the dynamic section,
//! unwind tables. What stays here is ebrec's alone: its own vDSO image. (ebrec never reads
//! DWARF: that is ebsym's job.)

/// ebrec's own vDSO image: the bytes of its `[vdso]` mapping (at getauxval(AT_SYSINFO_EHDR),
/// its size from /proc/self/maps), read once. The kernel maps the same image into every
/// 64-bit process, so it stands for theirs (the unwind rows of `[vdso]`, the trace's
/// `VdsoImage`). None when there is no vDSO.
pub fn own_vdso_image() -> Option<&'static [u8]> {
    static IMAGE: std::sync::OnceLock<Option<&'static [u8]>> = std::sync::OnceLock::new();
    *IMAGE.get_or_init(|| {
        // SAFETY: getauxval has no preconditions.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        if base == 0 {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
        let (range, _) = line.split_once(' ')?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        if a != base as u64 || b <= a {
            return None;
        }
        // SAFETY: [a, b) is our own vDSO mapping, readable and never unmapped for the life
        // of the process.
        Some(unsafe { std::slice::from_raw_parts(a as *const u8, (b - a) as usize) })
    })
}
