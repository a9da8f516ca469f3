//! A decoder of the allocation and free batches, the bulk of a heap trace, faster than
//! prost's: a packed column is a run of varints, and prost decodes each through a generic
//! `merge` with its checks (about 60 instructions a varint: half of the reading thread's
//! time on a trace of 8 M allocations and frees, more than zstd). This one reads a run in a
//! tight loop into the same `AllocBatch`/`FreeBatch`, so nothing downstream changes.
//!
//! It takes only what the writer writes: a record holding one batch, scalar fields as
//! varints, repeated fields packed. Anything else (an unknown field, an unpacked column, a
//! varint past 10 bytes) returns `None` and the record goes to prost, which gives the same
//! batch or the error.
use ebtrace_proto::v1::{record::Kind, AllocBatch, FreeBatch, Record};

/// Protobuf wire types used here.
const VARINT: u64 = 0;
const LEN: u64 = 2;

/// A varint at the front of `p`, advancing it.
#[inline(always)]
fn varint(p: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in p.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            // The tenth byte may carry one bit only.
            if i == 9 && b > 1 {
                return None;
            }
            *p = &p[i + 1..];
            return Some(v);
        }
    }
    None
}

/// The length-delimited payload at the front of `p`, advancing past it.
#[inline]
fn payload<'a>(p: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(p)?).ok()?;
    if len > p.len() {
        return None;
    }
    let (body, rest) = p.split_at(len);
    *p = rest;
    Some(body)
}

/// Appends the packed varints of `p`, each converted by `f`.
#[inline]
fn packed<T>(mut p: &[u8], out: &mut Vec<T>, f: impl Fn(u64) -> T) -> Option<()> {
    // At least one byte a value: this many fit.
    out.reserve(p.len().min(1 << 16));
    while let Some(&b) = p.first() {
        if b < 0x80 {
            out.push(f(u64::from(b)));
            p = &p[1..];
        } else {
            out.push(f(varint(&mut p)?));
        }
    }
    Some(())
}

#[inline]
fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The fields of one message: (field number, wire type, value or payload).
fn fields(mut p: &[u8], mut f: impl FnMut(u64, u64, u64, &[u8]) -> Option<()>) -> Option<()> {
    while !p.is_empty() {
        let key = varint(&mut p)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            VARINT => f(field, wire, varint(&mut p)?, &[])?,
            LEN => {
                let body = payload(&mut p)?;
                f(field, wire, 0, body)?
            }
            _ => return None,
        }
    }
    Some(())
}

/// The columns every batch starts with (fields 1-4: base time, time deltas, generations,
/// threads). `Some(false)`: not one of them.
struct Head<'a> {
    base_time_ns: &'a mut u64,
    time_delta: &'a mut Vec<i64>,
    generation: &'a mut Vec<u32>,
    tid: &'a mut Vec<u32>,
}

impl Head<'_> {
    #[inline]
    fn field(&mut self, field: u64, wire: u64, v: u64, body: &[u8]) -> Option<bool> {
        match (field, wire) {
            (1, VARINT) => *self.base_time_ns = v,
            (2, LEN) => packed(body, self.time_delta, zigzag)?,
            (3, LEN) => packed(body, self.generation, |v| v as u32)?,
            (4, LEN) => packed(body, self.tid, |v| v as u32)?,
            _ => return Some(false),
        }
        Some(true)
    }
}

/// The [`Head`] of a batch struct (each has the four fields under the same names).
macro_rules! head_of {
    ($b:expr) => {
        Head {
            base_time_ns: &mut $b.base_time_ns,
            time_delta: &mut $b.time_delta,
            generation: &mut $b.generation,
            tid: &mut $b.tid,
        }
    };
}

/// A batch this decoder reads: its head columns, and its own packed columns by field.
trait Batch: Default {
    fn head(&mut self) -> Head<'_>;
    /// Appends the packed column `body` of field `field` (None: not one of its columns).
    fn column(&mut self, field: u64, body: &[u8]) -> Option<()>;
}

impl Batch for AllocBatch {
    fn head(&mut self) -> Head<'_> {
        head_of!(self)
    }
    #[inline]
    fn column(&mut self, field: u64, body: &[u8]) -> Option<()> {
        match field {
            5 => packed(body, &mut self.stack, |v| v),
            6 => packed(body, &mut self.size, |v| v),
            7 => packed(body, &mut self.address_delta, zigzag),
            8 => packed(body, &mut self.kind, |v| v as i32),
            9 => packed(body, &mut self.sample_period, |v| v),
            10 => packed(body, &mut self.allocator, |v| v as u32),
            _ => None,
        }
    }
}

impl Batch for FreeBatch {
    fn head(&mut self) -> Head<'_> {
        head_of!(self)
    }
    #[inline]
    fn column(&mut self, field: u64, body: &[u8]) -> Option<()> {
        match field {
            5 => packed(body, &mut self.address_delta, zigzag),
            6 => packed(body, &mut self.allocator, |v| v as u32),
            _ => None,
        }
    }
}

fn batch<B: Batch>(p: &[u8]) -> Option<B> {
    let mut b = B::default();
    fields(p, |field, wire, v, body| {
        if b.head().field(field, wire, v, body)? {
            Some(())
        } else if wire == LEN {
            b.column(field, body)
        } else {
            None
        }
    })?;
    Some(b)
}

/// The record encoded in `body` if it is one allocation or free batch this decoder takes;
/// `None` sends it to prost.
pub fn decode(body: &[u8]) -> Option<Record> {
    // Record field 1 (allocs) or 2 (frees), length-delimited: one key byte.
    let (&key, mut rest) = body.split_first()?;
    let inner = payload(&mut rest)?;
    if !rest.is_empty() {
        return None;
    }
    let kind = match key {
        0x0a => Kind::Allocs(batch(inner)?),
        0x12 => Kind::Frees(batch(inner)?),
        _ => return None,
    };
    Some(Record { kind: Some(kind) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A small deterministic generator (no dependency for it).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Values of every varint length: small ones most often.
        fn value(&mut self) -> u64 {
            let bits = self.next() % 65;
            if bits == 64 {
                self.next()
            } else {
                self.next() & ((1u64 << bits) - 1)
            }
        }
    }

    fn random_alloc(r: &mut Rng, n: usize) -> AllocBatch {
        AllocBatch {
            base_time_ns: r.value(),
            time_delta: (0..n).map(|_| r.value() as i64).collect(),
            generation: (0..n).map(|_| r.value() as u32).collect(),
            tid: (0..n).map(|_| r.value() as u32).collect(),
            stack: (0..n).map(|_| r.value()).collect(),
            size: (0..n).map(|_| r.value()).collect(),
            address_delta: (0..n).map(|_| r.value() as i64).collect(),
            kind: (0..n).map(|_| (r.value() % 5) as i32).collect(),
            sample_period: if n % 2 == 0 {
                Vec::new()
            } else {
                (0..n).map(|_| r.value()).collect()
            },
            allocator: (0..n % 3).map(|_| r.value() as u32).collect(),
        }
    }

    /// What prost writes, this decodes to what prost reads, values of every length and
    /// sign; anything else it leaves to prost.
    #[test]
    fn decodes_what_prost_does() {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for n in [0, 1, 2, 7, 100, 1000] {
            let a = Record {
                kind: Some(Kind::Allocs(random_alloc(&mut r, n))),
            };
            let bytes = a.encode_to_vec();
            assert_eq!(decode(&bytes), Some(Record::decode(&bytes[..]).unwrap()));
            assert_eq!(decode(&bytes), Some(a));
            let f = Record {
                kind: Some(Kind::Frees(FreeBatch {
                    base_time_ns: r.value(),
                    time_delta: (0..n).map(|_| r.value() as i64).collect(),
                    generation: (0..n).map(|_| r.value() as u32).collect(),
                    tid: (0..n).map(|_| r.value() as u32).collect(),
                    address_delta: (0..n).map(|_| r.value() as i64).collect(),
                    allocator: (0..n).map(|_| r.value() as u32).collect(),
                })),
            };
            let bytes = f.encode_to_vec();
            assert_eq!(decode(&bytes), Some(f));
        }
        // Not a batch: prost's.
        let other = Record {
            kind: Some(Kind::Trailer(Default::default())),
        };
        assert_eq!(decode(&other.encode_to_vec()), None);
        // An unpacked column (legal protobuf, never written): prost's.
        let mut unpacked = vec![0x0a, 0];
        let mut inner = Vec::new();
        prost::encoding::uint32::encode(4, &7, &mut inner);
        unpacked[1] = inner.len() as u8;
        unpacked.extend(&inner);
        assert_eq!(decode(&unpacked), None);
        let via_prost = Record::decode(&unpacked[..]).unwrap();
        assert!(matches!(via_prost.kind, Some(Kind::Allocs(ref b)) if b.tid == [7]));
        // A cut column or an 11-byte varint: prost's (which fails).
        let good = Record {
            kind: Some(Kind::Allocs(random_alloc(&mut r, 10))),
        }
        .encode_to_vec();
        assert_eq!(decode(&good[..good.len() - 1]), None);
        let long = [
            0x0a, 13, 0x12, 11, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(decode(&long[..]), None);
        assert!(Record::decode(&long[..]).is_err());
    }
}
