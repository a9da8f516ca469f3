//! The blocks never freed, as the leak report classifies them: the heap report's leaked and
//! held bytes are `leaks`' on the same live blocks, and `ebsym report` shows that leak
//! report beside it.
use super::options::HeapOptions;
use super::sink::HeapSink;
use crate::hash::{FastMap, IdMap};
use crate::model::Loaded;
use crate::reports::leaks::{LeakOptions, LeakSink};
use crate::reports::top::{Group, Report};
use crate::reports::wrappers::WrapperRules;

/// A stack's blocks never freed: bytes to act on, bytes held by design, and what holds
/// them.
pub(super) type LeakedBytes = (u64, u64, Option<String>);

/// The leak report of the blocks never freed, and what the heap report takes from it.
pub(super) struct Leaked {
    /// The leak report (its first `leak_n` rows).
    pub(super) report: Report,
    /// Its rows' bytes by their stacks' classes ([`Loaded::stack_class`]).
    pub(super) by_class: FastMap<u32, LeakedBytes>,
    /// Blocks never freed per stack id.
    pub(super) never_freed: IdMap<u64>,
}

impl Leaked {
    /// One of the leak report's totals (0 if it has none).
    pub(super) fn total(&self, k: &str) -> u64 {
        self.report.totals.get(k).copied().unwrap_or(0)
    }
}

impl HeapSink {
    /// The leak report's classification of what is left, on the same live blocks (taken
    /// from the sink). Its remarks (pauses, lost frees) join `l`'s losses, without its
    /// frame counts, which the heap report makes again for every stack.
    pub(super) fn leaked(&mut self, l: &mut Loaded, q: &HeapOptions) -> Leaked {
        let mut never_freed: IdMap<u64> = IdMap::default();
        for (_, b) in self.live.blocks() {
            *never_freed.entry_or_default(b.stack) += 1;
        }
        let saved = l.losses.clone();
        let opts = LeakOptions {
            filter: q.filter,
            n: q.leak_n,
            rules: q.rules,
            group: Group::Stack,
            wrappers: &WrapperRules::default(),
        };
        let mut by_class: FastMap<u32, LeakedBytes> = FastMap::default();
        let leak = LeakSink::from_parts(
            std::mem::take(&mut self.live),
            self.last_ns,
            self.alloc_events,
        )
        .report_seeing(l, &opts, &mut |class, bytes, held_by| {
            let e = by_class.entry(class).or_insert((0, 0, held_by.cloned()));
            if held_by.is_some() {
                e.1 += bytes;
            } else {
                e.0 += bytes;
            }
        });
        let leak_damage: Vec<String> = leak
            .losses
            .damage
            .iter()
            .filter(|d| !saved.damage.contains(d))
            .cloned()
            .collect();
        l.losses = saved;
        l.losses.damage.extend(leak_damage);
        Leaked {
            by_class,
            report: leak,
            never_freed,
        }
    }
}
