//! Synthetic workloads for the benchmarks: allocation events whose stacks repeat the way a
//! real service's do (a few thousand call sites, 10–40 frames, Zipf-like popularity, one
//! size per call site mostly, addresses reused by a free-list allocator).
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One synthetic allocation with its raw user stack.
#[derive(Debug, Clone)]
pub struct SynthAlloc {
    pub time_ns: u64,
    pub tid: u32,
    pub site: usize,
    pub size: u64,
    pub address: u64,
}

/// Generator of [`SynthAlloc`]s.
#[derive(Debug)]
pub struct Synth {
    rng: StdRng,
    pub stacks: Vec<Vec<u64>>,
    sizes: Vec<u64>,
    cumulative: Vec<f64>,
    time: u64,
    bump: Vec<u64>,
    freed: Vec<Vec<u64>>,
}

impl Synth {
    /// `sites` distinct call stacks; deterministic for a `seed`.
    pub fn new(sites: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        // Frames come from a shared pool of functions, as real stacks share their outer
        // frames (main, the event loop, the request handler).
        let pool: Vec<u64> = (0..2000)
            .map(|i| 0x5555_5555_0000 + i * 0x97 + rng.random_range(0..0x40))
            .collect();
        let libc: Vec<u64> = (0..20).map(|i| 0x7f12_3400_0000 + i * 0x1234).collect();
        let stacks: Vec<Vec<u64>> = (0..sites)
            .map(|_| {
                let depth = rng.random_range(10..=40);
                let mut s = vec![libc[rng.random_range(0..libc.len())]];
                // Outer frames: a common prefix (reversed, since stacks are leaf first).
                let mut outer: Vec<u64> = pool[..8].to_vec();
                while s.len() + outer.len() < depth {
                    s.push(pool[rng.random_range(8..pool.len())]);
                }
                outer.reverse();
                s.extend(outer);
                s
            })
            .collect();
        let classes = [
            16u64, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 4096, 8192, 65536,
        ];
        let sizes = (0..sites)
            .map(|_| classes[rng.random_range(0..classes.len())])
            .collect();
        // Zipf(1.1)-like popularity.
        let mut acc = 0.0;
        let cumulative = (0..sites)
            .map(|i| {
                acc += 1.0 / ((i + 1) as f64).powf(1.1);
                acc
            })
            .collect();
        Synth {
            rng,
            stacks,
            sizes,
            cumulative,
            time: 1_000_000_000,
            bump: (0..8).map(|t| 0x5600_0000_0000 + t * (1 << 32)).collect(),
            freed: vec![Vec::new(); 8],
        }
    }

    /// The next allocation.
    pub fn next_alloc(&mut self) -> SynthAlloc {
        let total = *self.cumulative.last().unwrap();
        let x = self.rng.random::<f64>() * total;
        let site = self
            .cumulative
            .partition_point(|&c| c < x)
            .min(self.stacks.len() - 1);
        self.time += self.rng.random_range(50..1000);
        let t = self.rng.random_range(0..8usize);
        let size = if self.rng.random_bool(0.9) {
            self.sizes[site]
        } else {
            self.rng.random_range(1..4096)
        };
        let address = match self.freed[t].pop() {
            Some(a) if self.rng.random_bool(0.8) => a,
            _ => {
                let a = self.bump[t];
                self.bump[t] += size.next_multiple_of(16) + 16;
                a
            }
        };
        if self.rng.random_bool(0.7) {
            self.freed[t].push(address);
            if self.freed[t].len() > 64 {
                self.freed[t].remove(0);
            }
        }
        SynthAlloc {
            time_ns: self.time,
            tid: 1000 + t as u32,
            site,
            size,
            address,
        }
    }
}
