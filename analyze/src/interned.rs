//! Names resolved once: every function, file and module name of a trace's frames is
//! interned as a small id ([`Names`], held by [`crate::model::Loaded`]), so that a stack is
//! a few words per frame ([`IFrame`]), stacks are hashed, compared and grouped by ids
//! ([`FrameIds`]) rather than by their names' bytes, and a name's bytes are turned into
//! text once, not once per frame of every stack that shows it. A report makes
//! [`Frame`]s (with their own strings) only for the rows it prints.
use crate::hash::{FastMap, IdMap};
use ebtrace_format::Tables;
use serde::Serialize;
use std::cmp::Ordering;
use std::sync::Arc;

/// A frame as reports show it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub inlined: bool,
    pub module: String,
    /// Runtime address, hex.
    pub address: String,
}

impl Frame {
    /// `function (file:line)`, with inlined frames marked; kernel functions as
    /// `function [kernel]` or `function [kernel:module]`.
    pub fn display(&self) -> String {
        let mut s = self.function.clone();
        if let (Some(f), Some(l)) = (&self.file, self.line) {
            s.push_str(&format!(" ({f}:{l})"));
        }
        if self.inlined {
            s.push_str(" [inlined]");
        }
        // Kernel functions say they are, and in which module.
        if self.module.starts_with("[kernel") && !self.function.starts_with("[kernel]") {
            s.push(' ');
            s.push_str(&self.module);
        }
        s
    }
}

/// Frames made once each and shared ([`SharedFrames`]): a report that holds every stack
/// (a pprof profile, a diff) holds a pointer per frame, not the frame's strings again for
/// every stack that shows it (2.6 GB against a few hundred MB on a compiler's trace).
pub type SharedFrame = Arc<Frame>;

/// The [`SharedFrame`] of each interned frame, made on first use.
#[derive(Debug, Default)]
pub struct SharedFrames(FastMap<IFrame, SharedFrame>);

impl SharedFrames {
    /// The shared frames of `fs`, named with `names`.
    pub fn frames(&mut self, names: &Names, fs: &[IFrame]) -> Vec<SharedFrame> {
        fs.iter()
            .map(|f| {
                self.0
                    .entry(*f)
                    .or_insert_with(|| Arc::new(names.frame(f)))
                    .clone()
            })
            .collect()
    }
}

/// A frame whose names are ids in [`Names`]: what [`Frame`] holds, a few words long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IFrame {
    pub function: u32,
    /// [`NO_FILE`] when the frame has none.
    pub file: u32,
    pub line: Option<u32>,
    pub inlined: bool,
    pub module: u32,
    /// The address shown (as `{:#x}`).
    pub address: u64,
}

/// What the rules over frames read of one (the leak rules, the allocator wrappers): a
/// [`Frame`] with its own strings, or an [`IFrame`] with its [`Names`] ([`Named`]), so
/// that a report decides on every stack without making a `Frame` of each.
pub trait FrameView {
    fn function(&self) -> &str;
    fn file(&self) -> Option<&str>;
    fn line(&self) -> Option<u32>;
    fn module(&self) -> &str;
    /// (function, file, module) ids when the frame is interned: what a rule decides of a
    /// frame from these names can be kept by them.
    fn ids(&self) -> Option<(u32, u32, u32)> {
        None
    }
}

impl<T: FrameView + ?Sized> FrameView for &T {
    fn function(&self) -> &str {
        (**self).function()
    }
    fn file(&self) -> Option<&str> {
        (**self).file()
    }
    fn line(&self) -> Option<u32> {
        (**self).line()
    }
    fn module(&self) -> &str {
        (**self).module()
    }
    fn ids(&self) -> Option<(u32, u32, u32)> {
        (**self).ids()
    }
}

impl FrameView for Frame {
    fn function(&self) -> &str {
        &self.function
    }
    fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }
    fn line(&self) -> Option<u32> {
        self.line
    }
    fn module(&self) -> &str {
        &self.module
    }
}

/// An interned frame read with its names.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub names: &'a Names,
    pub frame: IFrame,
}

impl FrameView for Named<'_> {
    fn function(&self) -> &str {
        self.names.get(self.frame.function)
    }
    fn file(&self) -> Option<&str> {
        (self.frame.file != NO_FILE).then(|| self.names.get(self.frame.file))
    }
    fn line(&self) -> Option<u32> {
        self.frame.line
    }
    fn module(&self) -> &str {
        self.names.get(self.frame.module)
    }
    fn ids(&self) -> Option<(u32, u32, u32)> {
        Some((self.frame.function, self.frame.file, self.frame.module))
    }
}

/// The file id of a frame without one (no name has it).
pub const NO_FILE: u32 = 0;

/// A stack's frames as (function, file, line, inlined) ids, without modules and
/// addresses: the key under which stack ids that symbolize alike merge (as the names
/// themselves would: equal names have equal ids).
pub type FrameIds = Box<[FrameKey]>;

/// One frame of a [`FrameIds`], 12 bytes: function id, file id ([`NO_FILE`] for none),
/// and the line (0 for none: the symbolizer has no line 0) with the inlined flag in its top
/// bit ([`FrameKey::line`], [`FrameKey::inlined`]). Tens of thousands of stacks of a
/// hundred frames are held as keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameKey([u32; 3]);

const INLINED: u32 = 1 << 31;

/// As the (function, file, line, inlined) tuple it packs.
impl Ord for FrameKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let t = |k: &FrameKey| (k.function(), k.file(), k.line(), k.inlined());
        t(self).cmp(&t(other))
    }
}

impl PartialOrd for FrameKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FrameKey {
    pub fn new(function: u32, file: u32, line: Option<u32>, inlined: bool) -> FrameKey {
        let line = line.unwrap_or(0) & !INLINED;
        FrameKey([function, file, line | if inlined { INLINED } else { 0 }])
    }
    pub fn function(&self) -> u32 {
        self.0[0]
    }
    pub fn file(&self) -> u32 {
        self.0[1]
    }
    pub fn line(&self) -> Option<u32> {
        Some(self.0[2] & !INLINED).filter(|&l| l != 0)
    }
    pub fn inlined(&self) -> bool {
        self.0[2] & INLINED != 0
    }
}

/// The interned names of a trace: each distinct text once.
#[derive(Debug)]
pub struct Names {
    /// Id -> text; id 0 is [`NO_FILE`], never handed out.
    list: Vec<Arc<str>>,
    ids: FastMap<Arc<str>, u32>,
    /// The trace's string id -> name id, so that a string is converted once.
    table: IdMap<u32>,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            list: vec![Arc::from("")],
            ids: FastMap::default(),
            table: IdMap::default(),
        }
    }
}

impl Names {
    /// The id of `s`, interned if new.
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.list.len() as u32;
        let a: Arc<str> = Arc::from(s);
        self.list.push(a.clone());
        self.ids.insert(a, id);
        id
    }

    /// The id of the trace's string `id` (its text as [`Tables::string`] gives it).
    pub fn of_table(&mut self, tables: &Tables, id: u64) -> u32 {
        if let Some(&n) = self.table.get(id) {
            return n;
        }
        let n = self.intern(&tables.string(id));
        *self.table.entry_or_default(id) = n;
        n
    }

    /// The text of name `id`.
    pub fn get(&self, id: u32) -> &str {
        &self.list[id as usize]
    }

    /// The frame `f` with its names' text.
    pub fn frame(&self, f: &IFrame) -> Frame {
        Frame {
            function: self.get(f.function).to_string(),
            file: (f.file != NO_FILE).then(|| self.get(f.file).to_string()),
            line: f.line,
            inlined: f.inlined,
            module: self.get(f.module).to_string(),
            address: format!("{:#x}", f.address),
        }
    }

    /// Each frame read with these names ([`FrameView`]).
    pub fn view(&self, fs: &[IFrame]) -> Vec<Named<'_>> {
        fs.iter()
            .map(|&frame| Named { names: self, frame })
            .collect()
    }

    /// [`Names::frame`] of each.
    pub fn frames(&self, fs: &[IFrame]) -> Vec<Frame> {
        fs.iter().map(|f| self.frame(f)).collect()
    }

    /// The merge key of interned frames.
    pub fn ids(fs: &[IFrame]) -> FrameIds {
        fs.iter()
            .map(|f| FrameKey::new(f.function, f.file, f.line, f.inlined))
            .collect()
    }

    /// The merge key of frames with their own strings (the same key as [`Names::ids`] of
    /// the frames they were made from).
    pub fn ids_of(&mut self, frames: &[Frame]) -> FrameIds {
        frames
            .iter()
            .map(|f| {
                let file = f.file.as_deref().map_or(NO_FILE, |s| self.intern(s));
                FrameKey::new(self.intern(&f.function), file, f.line, f.inlined)
            })
            .collect()
    }

    /// Interned frames in the order of their [`Frame`]s (`Vec<Frame>`'s `Ord`: function,
    /// file, line, inlined, module, address, frame by frame, then length).
    pub fn cmp(&self, a: &[IFrame], b: &[IFrame]) -> Ordering {
        for (x, y) in a.iter().zip(b) {
            if x == y {
                continue;
            }
            let file = |f: &IFrame| (f.file != NO_FILE).then(|| self.get(f.file));
            let o = self
                .get(x.function)
                .cmp(self.get(y.function))
                .then_with(|| file(x).cmp(&file(y)))
                .then_with(|| x.line.cmp(&y.line))
                .then_with(|| x.inlined.cmp(&y.inlined))
                .then_with(|| self.get(x.module).cmp(self.get(y.module)))
                .then_with(|| format!("{:#x}", x.address).cmp(&format!("{:#x}", y.address)));
            if o != Ordering::Equal {
                return o;
            }
        }
        a.len().cmp(&b.len())
    }

    /// Each name's rank in text order (by id): ids compared by rank compare as their texts.
    pub fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (1..self.list.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.get(a).cmp(self.get(b)));
        let mut rank = vec![0u32; self.list.len()];
        for (r, id) in order.into_iter().enumerate() {
            rank[id as usize] = r as u32 + 1;
        }
        rank
    }

    /// How many names (for the memory notes of the benchmarks).
    pub fn len(&self) -> usize {
        self.list.len() - 1
    }

    /// Whether no name was interned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: &str, file: Option<&str>, address: &str) -> Frame {
        Frame {
            function: function.into(),
            file: file.map(Into::into),
            line: Some(3),
            inlined: false,
            module: "m".into(),
            address: address.into(),
        }
    }

    #[test]
    fn interned_frames_order_as_their_frames() {
        let mut n = Names::default();
        let frames = [
            f("b", None, "0x10"),
            f("a", Some("x.cc"), "0x9"),
            f("a", None, "0x9"),
            f("a", None, "0x10"),
            f("", Some(""), "0x1"),
        ];
        let ifr: Vec<IFrame> = frames
            .iter()
            .map(|x| IFrame {
                function: n.intern(&x.function),
                file: x.file.as_deref().map_or(NO_FILE, |s| n.intern(s)),
                line: x.line,
                inlined: x.inlined,
                module: n.intern(&x.module),
                address: u64::from_str_radix(&x.address[2..], 16).unwrap(),
            })
            .collect();
        for i in 0..frames.len() {
            assert_eq!(n.frame(&ifr[i]), frames[i]);
            for j in 0..frames.len() {
                let want = frames[i..=i].cmp(&frames[j..=j]);
                assert_eq!(n.cmp(&ifr[i..=i], &ifr[j..=j]), want, "{i} {j}");
            }
        }
        assert_eq!(n.ids_of(&frames[1..3]), Names::ids(&ifr[1..3]));
        let r = n.ranks();
        assert!(r[n.intern("a") as usize] < r[n.intern("b") as usize]);
    }
}
