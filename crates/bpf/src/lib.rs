//! The BPF side's Rust face: the skeletons of `bpf/*.bpf.c` (built by build.rs with
//! clang-19 into OUT_DIR), the event structs of `bpf/events.h`, its constants (`MAX_FRAMES`,
//! `CTR_*`, …) and the preloaded allocation sampler's shared library (`bpf/preload.c`).
//! No logic: loading and attaching is `ebtrace-record`'s.
pub mod alloc_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/alloc.skel.rs"));
}
pub mod lock_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/lock.skel.rs"));
}
pub mod profile_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}
pub mod sampler_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/sampler.skel.rs"));
}
pub mod hub_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/hub.skel.rs"));
}
pub mod system_skel {
    #![allow(clippy::all, missing_debug_implementations, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/system.skel.rs"));
}

/// Event types of `bpf/events.h`.
pub use alloc_skel::types::{
    agg_key, agg_stack, agg_val, alloc_event, event_header, fork_hold_event, free_event,
};
pub use hub_skel::types::thread_name_event;
pub use lock_skel::types::lock_event;
pub use profile_skel::types::{
    cfi_early, cfi_file, cfi_inode, cfi_map, cfi_proc, copy_event, func_event, mem_event,
    offcpu_event, req_out, sample_event, usdt_event,
};
pub use system_skel::types::{
    bio_event, chain_cost, hist_key, hist_val, runq_event, syscall_event, tcp_event,
};

// SAFETY: plain C structs of integers; any bytes are a valid value.
unsafe impl plain::Plain for alloc_event {}
unsafe impl plain::Plain for free_event {}
unsafe impl plain::Plain for fork_hold_event {}
unsafe impl plain::Plain for lock_event {}
unsafe impl plain::Plain for event_header {}
unsafe impl plain::Plain for agg_key {}
unsafe impl plain::Plain for agg_val {}
unsafe impl plain::Plain for agg_stack {}
unsafe impl plain::Plain for sample_event {}
unsafe impl plain::Plain for offcpu_event {}
unsafe impl plain::Plain for func_event {}
unsafe impl plain::Plain for mem_event {}
unsafe impl plain::Plain for usdt_event {}
unsafe impl plain::Plain for cfi_file {}
unsafe impl plain::Plain for cfi_proc {}
unsafe impl plain::Plain for cfi_inode {}
unsafe impl plain::Plain for syscall_event {}
unsafe impl plain::Plain for bio_event {}
unsafe impl plain::Plain for runq_event {}
unsafe impl plain::Plain for tcp_event {}
unsafe impl plain::Plain for hist_key {}
unsafe impl plain::Plain for hist_val {}
unsafe impl plain::Plain for chain_cost {}
unsafe impl plain::Plain for thread_name_event {}

/// The constants of bpf/events.h (MAX_FRAMES, CTR_*, …), generated from the header by build.rs.
#[allow(dead_code)]
mod bpf_consts {
    include!(concat!(env!("OUT_DIR"), "/bpf_consts.rs"));
}
pub use bpf_consts::*;

/// The preloaded allocation sampler (`--alloc-sampler preload`): bpf/preload.c, compiled by
/// build.rs with the system cc and embedded so that ebrec stays one file.
pub static PRELOAD_SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libebtrace_preload.so"));
