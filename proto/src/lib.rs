//! The ebtrace trace schema, generated from `proto/trace.proto` by prost at build time.
//!
//! Every type lives in [`v1`]; the file layout around the records is described at the top of
//! `trace.proto` and implemented by the `ebtrace-format` crate.
//!
//! ```
//! use ebtrace_proto::v1::{record::Kind, Record, ClockSync};
//! let r = Record { kind: Some(Kind::ClockSync(ClockSync { boottime_ns: 1, ..Default::default() })) };
//! assert!(matches!(r.kind, Some(Kind::ClockSync(_))));
//! ```

/// Version 1 of the schema.
#[allow(missing_debug_implementations, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/ebtrace.v1.rs"));
}

/// pprof's `profile.proto` (package `perftools.profiles`, Google's Apache-2.0 schema in
/// `proto/profile.proto`), what `ebsym pprof` writes (gzip-compressed).
#[allow(missing_debug_implementations, clippy::all)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// Parca's `ProfileStoreService.WriteRaw` messages (package `parca.profilestore.v1alpha1`,
/// vendored in `proto/parca/`), what `ebrec push parca+…` sends.
#[allow(missing_debug_implementations, clippy::all)]
pub mod parca {
    include!(concat!(env!("OUT_DIR"), "/parca.profilestore.v1alpha1.rs"));
}

/// OpenTelemetry's protos (release v1.11.0, vendored in `proto/opentelemetry/`): the
/// development profiles signal and what it needs, what `ebrec push otlp+…` sends. The
/// modules follow the packages, as prost's cross-package paths expect.
#[allow(missing_debug_implementations, clippy::all)]
pub mod opentelemetry {
    pub mod proto {
        pub mod common {
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.common.v1.rs"
                ));
            }
        }
        pub mod resource {
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.resource.v1.rs"
                ));
            }
        }
        pub mod profiles {
            pub mod v1development {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.profiles.v1development.rs"
                ));
            }
        }
        pub mod collector {
            pub mod profiles {
                pub mod v1development {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/opentelemetry.proto.collector.profiles.v1development.rs"
                    ));
                }
            }
        }
    }
}

/// The format version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
