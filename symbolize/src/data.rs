//! The data addresses a trace's probe arguments point at, named offline: the
//! `std::type_info` objects that libstdc++'s `libstdcxx:throw` and `libstdcxx:rethrow` pass
//! (argument 1) under `ebrec --exceptions`. ebrec records only the address; here it is
//! placed in the binary the process had mapped there (through an executable mapping of the
//! same file: every PT_LOAD segment of an ELF moves by one bias) and named from that
//! binary's symbol tables (or its debug file's): `typeinfo for std::out_of_range`. No
//! target memory is read, at the recording or here.
use crate::resolve::{Module, Symbolizer};
use ebtrace_format::events::Family;
use ebtrace_format::proto::record::Kind;
use ebtrace_format::proto::Record;
use ebtrace_format::Tables;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// The probes whose argument 1 is a `std::type_info *`: (provider, name).
pub const TYPE_INFO_PROBES: [(&str, &str); 2] = [("libstdcxx", "throw"), ("libstdcxx", "rethrow")];

/// Gathers the (generation, address) pairs to name while a trace is read.
#[derive(Default)]
pub(crate) struct DataAddresses {
    probes: HashSet<u64>,
    wanted: BTreeSet<(u32, u64)>,
}

/// A named data address.
pub(crate) struct Named {
    pub generation: u32,
    pub address: u64,
    pub name: String,
    pub module: Vec<u8>,
}

impl DataAddresses {
    /// Notes the exception probes and their hits' type_info addresses; `tables` has seen
    /// every record before this one.
    pub fn observe(&mut self, rec: &Record, tables: &Tables) {
        match &rec.kind {
            Some(Kind::ProbedUsdt(p)) => {
                let s = |id: u64| tables.strings.get(&id).map(Vec::as_slice).unwrap_or(b"");
                let (provider, name) = (s(p.provider), s(p.name));
                if TYPE_INFO_PROBES
                    .iter()
                    .any(|(pr, n)| provider == pr.as_bytes() && name == n.as_bytes())
                {
                    self.probes.insert(p.id);
                }
            }
            Some(Kind::Usdts(b)) if !self.probes.is_empty() => {
                for e in b.decode().unwrap_or_default() {
                    if self.probes.contains(&e.probe) {
                        if let Some(&a) = e.args.get(1).filter(|&&a| a != 0) {
                            self.wanted.insert((e.generation, a));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Names what was gathered: each address in the binary whose image holds it, by that
    /// binary's data symbols. An address no binary names is left out.
    pub fn name(&self, tables: &Tables, symbolizer: &Symbolizer) -> Vec<Named> {
        let mut modules: HashMap<u64, Module> = HashMap::new();
        let mut out = Vec::new();
        for &(generation, address) in &self.wanted {
            let Some(g) = tables.generations.get(&generation) else {
                continue;
            };
            let mut done: HashSet<u64> = HashSet::new();
            for m in g
                .mappings
                .iter()
                .filter(|m| m.build_id != 0 && m.perms & 4 != 0)
            {
                if !done.insert(m.build_id) {
                    continue;
                }
                let Some(build_id) = tables.build_ids.get(&m.build_id) else {
                    continue;
                };
                let path = tables.strings.get(&m.path).cloned().unwrap_or_default();
                let module = modules.entry(m.build_id).or_insert_with(|| {
                    let p = String::from_utf8_lossy(&path).into_owned();
                    symbolizer.open(Some(build_id), Path::new(&p))
                });
                let Some(v0) = module.offset_to_vaddr(m.file_offset) else {
                    continue;
                };
                let bias = m.start.wrapping_sub(v0);
                let v = address.wrapping_sub(bias);
                if !module
                    .loads()
                    .iter()
                    .any(|l| v >= l.vaddr && v - l.vaddr < l.memsz)
                {
                    continue;
                }
                if let Some(name) = module.data_symbol(v) {
                    out.push(Named {
                        generation,
                        address,
                        name,
                        module: path,
                    });
                }
                break;
            }
        }
        out
    }
}
