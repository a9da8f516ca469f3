//! OTLP/HTTP profiles: `POST /v1development/profiles`, `application/x-protobuf`, an
//! `ExportProfilesServiceRequest` of opentelemetry-proto **v1.11.0** (vendored in
//! `proto/opentelemetry/`; the profiles signal is in development and its wire format
//! changed between releases: a receiver must speak v1.11.0).
//!
//! One request per window: one ResourceProfiles (service.name, host.name, os.type,
//! os.version and the configured labels), one ScopeProfiles (`ebrec`), and for each kind
//! one Profile per pprof sample type (OTLP has one sample type per profile), all over one
//! shared dictionary whose entries at index 0 are the zero values the spec requires.
//! Mappings carry the GNU build-id as `process.executable.build_id.gnu`; locations are
//! the pprof's (address and mapping; lines only where the profile has names); samples carry
//! `process.pid`, `process.executable.name` (comm), `container.id`, and the other pprof
//! labels under their own names.
use super::{judge_status, Outcome, Reply, Request, Window};
use ebtrace_proto::opentelemetry::proto::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use ebtrace_proto::opentelemetry::proto::common::v1::{
    any_value, AnyValue, InstrumentationScope, KeyValue,
};
use ebtrace_proto::opentelemetry::proto::profiles::v1development as otel;
use ebtrace_proto::opentelemetry::proto::resource::v1::Resource;
use ebtrace_proto::pprof::Profile as Pprof;
use prost::Message;
use std::collections::HashMap;

pub const PATH: &str = "/v1development/profiles";

#[derive(Default)]
struct Dict {
    d: otel::ProfilesDictionary,
    strings: HashMap<String, i32>,
    attrs: HashMap<(i32, String), i32>,
    stacks: HashMap<Vec<i32>, i32>,
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dict::default();
        d.d.mapping_table.push(Default::default());
        d.d.location_table.push(Default::default());
        d.d.function_table.push(Default::default());
        d.d.link_table.push(otel::Link {
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
        });
        d.d.attribute_table.push(Default::default());
        d.d.stack_table.push(Default::default());
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attr(&mut self, key: &str, v: any_value::Value) -> i32 {
        let k = self.string(key);
        let id = format!("{v:?}");
        if let Some(&i) = self.attrs.get(&(k, id.clone())) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(otel::KeyValueAndUnit {
            key_strindex: k,
            value: Some(AnyValue { value: Some(v) }),
            unit_strindex: 0,
        });
        self.attrs.insert((k, id), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(otel::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }
}

fn kv(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

/// The OTLP attribute key of a pprof label of ours.
fn attr_key(k: &str) -> &str {
    match k {
        "pid" => "process.pid",
        "comm" => "process.executable.name",
        "container" => "container.id",
        k => k,
    }
}

/// A random-enough 16-byte profile id.
fn profile_id(n: u64) -> Vec<u8> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(std::process::id());
    let mut out = Vec::with_capacity(16);
    for _ in 0..2 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// The ExportProfilesServiceRequest of a window.
pub fn export_request(w: &Window) -> ExportProfilesServiceRequest {
    let mut dict = Dict::new();
    let mut profiles = Vec::new();
    for kp in &w.profiles {
        let p = &kp.profile;
        let location_index = dict.add_tables(p);
        let samples = dict.sample_keys(p, &location_index);
        let s = |i: i64| p.string_table.get(i as usize).map_or("", |s| s.as_str());
        let period_type = p.period_type.as_ref().map(|t| otel::ValueType {
            type_strindex: dict.string(s(t.r#type)),
            unit_strindex: dict.string(s(t.unit)),
        });
        for (i, st) in p.sample_type.iter().enumerate() {
            let sample_type = otel::ValueType {
                type_strindex: dict.string(s(st.r#type)),
                unit_strindex: dict.string(s(st.unit)),
            };
            let kind_attr = dict.attr(
                "profile.kind",
                any_value::Value::StringValue(kp.kind.name().to_string()),
            );
            profiles.push(otel::Profile {
                sample_type: Some(sample_type),
                samples: p
                    .sample
                    .iter()
                    .zip(&samples)
                    .filter(|(smp, _)| smp.value.get(i).is_some_and(|v| *v != 0))
                    .map(|(smp, (stack, attrs))| otel::Sample {
                        stack_index: *stack,
                        values: vec![smp.value[i]],
                        attribute_indices: attrs.clone(),
                        ..Default::default()
                    })
                    .collect(),
                time_unix_nano: w.from_ns,
                duration_nano: w.until_ns.saturating_sub(w.from_ns),
                period_type,
                period: p.period,
                profile_id: profile_id(profiles.len() as u64 + 1),
                attribute_indices: vec![kind_attr],
                ..Default::default()
            });
        }
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![otel::ResourceProfiles {
            resource: Some(Resource {
                attributes: resource_attributes(w),
                ..Default::default()
            }),
            scope_profiles: vec![otel::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "ebrec".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.d),
    }
}

/// The window's resource: the service, the host, the kernel and the other labels.
fn resource_attributes(w: &Window) -> Vec<KeyValue> {
    let mut attributes = vec![
        kv("service.name", &w.service),
        kv("host.name", w.label("host")),
        kv("os.type", "linux"),
        kv("os.version", w.label("kernel")),
    ];
    for (k, v) in &w.labels {
        if !matches!(k.as_str(), "service_name" | "host" | "kernel") {
            attributes.push(kv(k, v));
        }
    }
    attributes
}

impl Dict {
    /// A pprof profile's mappings, functions and locations into the dictionary's tables;
    /// its location ids (1-based) -> their indices there.
    fn add_tables(&mut self, p: &Pprof) -> HashMap<u64, i32> {
        let s = |i: i64| p.string_table.get(i as usize).map_or("", |s| s.as_str());
        let mut mapping_index = HashMap::new();
        for m in &p.mapping {
            let mut attribute_indices = Vec::new();
            if m.build_id != 0 && !s(m.build_id).is_empty() {
                attribute_indices.push(self.attr(
                    "process.executable.build_id.gnu",
                    any_value::Value::StringValue(s(m.build_id).to_string()),
                ));
            }
            let filename_strindex = self.string(s(m.filename));
            let i = self.d.mapping_table.len() as i32;
            self.d.mapping_table.push(otel::Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename_strindex,
                attribute_indices,
            });
            mapping_index.insert(m.id, i);
        }
        let mut function_index = HashMap::new();
        for f in &p.function {
            let name_strindex = self.string(s(f.name));
            let system_name_strindex = self.string(s(f.system_name));
            let filename_strindex = self.string(s(f.filename));
            let i = self.d.function_table.len() as i32;
            self.d.function_table.push(otel::Function {
                name_strindex,
                system_name_strindex,
                filename_strindex,
                start_line: f.start_line,
            });
            function_index.insert(f.id, i);
        }
        let mut location_index = HashMap::new();
        for l in &p.location {
            let i = self.d.location_table.len() as i32;
            self.d.location_table.push(otel::Location {
                mapping_index: mapping_index.get(&l.mapping_id).copied().unwrap_or(0),
                address: l.address,
                lines: l
                    .line
                    .iter()
                    .map(|ln| otel::Line {
                        function_index: function_index.get(&ln.function_id).copied().unwrap_or(0),
                        line: ln.line,
                        column: 0,
                    })
                    .collect(),
                attribute_indices: Vec::new(),
            });
            location_index.insert(l.id, i);
        }
        location_index
    }

    /// Each sample's stack and attributes, once: (stack index, attribute indices).
    fn sample_keys(
        &mut self,
        p: &Pprof,
        location_index: &HashMap<u64, i32>,
    ) -> Vec<(i32, Vec<i32>)> {
        let s = |i: i64| p.string_table.get(i as usize).map_or("", |s| s.as_str());
        p.sample
            .iter()
            .map(|smp| {
                let stack = self.stack(
                    smp.location_id
                        .iter()
                        .map(|id| location_index.get(id).copied().unwrap_or(0))
                        .collect(),
                );
                let attrs = smp
                    .label
                    .iter()
                    .map(|l| {
                        let key = attr_key(s(l.key));
                        let v = s(l.str);
                        let value = match (key, v.parse::<i64>()) {
                            ("process.pid", Ok(n)) => any_value::Value::IntValue(n),
                            _ => any_value::Value::StringValue(v.to_string()),
                        };
                        self.attr(key, value)
                    })
                    .collect();
                (stack, attrs)
            })
            .collect()
    }
}

pub fn requests(w: &Window) -> Vec<Request> {
    if w.profiles.is_empty() {
        return Vec::new();
    }
    vec![Request {
        what: "window".into(),
        path: PATH.into(),
        content_type: "application/x-protobuf".into(),
        headers: Vec::new(),
        body: export_request(w).encode_to_vec(),
    }]
}

/// A 2xx whose body is an ExportProfilesServiceResponse (a partial success is taken, its
/// rejections said once); anything else in a 2xx is a garbled answer, retried.
/// The message of a google.rpc.Status body (what an OTLP receiver answers an error with).
fn status_message(body: &[u8]) -> Option<String> {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
    }
    Status::decode(body)
        .ok()
        .filter(|s| !s.message.is_empty())
        .map(|s| s.message)
}

pub fn judge(r: &Reply) -> Outcome {
    if let Some(o) = judge_status(r) {
        let protobuf = r
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-protobuf"));
        return match (o, protobuf.then(|| status_message(&r.body)).flatten()) {
            (Outcome::Retry(_), Some(m)) => Outcome::Retry(format!("HTTP {}: {m}", r.status)),
            (Outcome::Drop(_), Some(m)) => Outcome::Drop(format!("HTTP {}: {m}", r.status)),
            (o, _) => o,
        };
    }
    let ct = r.header("content-type").unwrap_or("");
    if !r.body.is_empty() && !ct.starts_with("application/x-protobuf") {
        return Outcome::Retry(format!(
            "not a protobuf answer (Content-Type {ct:?}): {}",
            r.message()
        ));
    }
    match ExportProfilesServiceResponse::decode(&r.body[..]) {
        Ok(resp) => {
            if let Some(ps) = resp.partial_success {
                if ps.rejected_profiles > 0 {
                    eprintln!(
                        "ebrec: push: the OTLP receiver rejected {} profile(s): {}",
                        ps.rejected_profiles,
                        super::one_line(&ps.error_message, 300)
                    );
                }
            }
            Outcome::Pushed
        }
        Err(e) => Outcome::Retry(format!("garbled ExportProfilesServiceResponse: {e}")),
    }
}
