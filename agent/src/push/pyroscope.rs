//! Grafana Pyroscope's ingest API: `POST /ingest?name=SERVICE.KIND{labels}&from=…&until=…
//! &spyName=ebrec[&sampleRate=HZ]`, a `multipart/form-data` body with the gzipped pprof in
//! the field `profile` and, in `sample_type_config`, a JSON object per sample type (units,
//! aggregation sum/average, cumulative, sampled, display-name: Pyroscope's
//! `tree.SampleTypeConfig`).
//!
//! No `format=pprof` in the query: Pyroscope's handler (pkg/ingester/pyroscope
//! `readInputRawDataFromRequest`) takes `format=pprof` to mean the body *is* the pprof,
//! and reads the multipart form (and so `sample_type_config`) only without a `format`,
//! from the Content-Type, as pyroscope-go does. One request per kind.
//!
//! The display names choose the profile's `__name__` by Pyroscope's rules (a type whose
//! display name holds `cpu` is `process_cpu`, `alloc_`/`inuse_` `memory`, `mutex_` `mutex`,
//! `block_` `block`): cpu → process_cpu, alloc → memory, lock → mutex, offcpu → block
//! (time blocked, as Go's block profile); the other kinds keep names of their own.
use super::{judge_status, Outcome, Reply, Request, Window};
use ebtrace_analyze::reports::EventKind;

/// (units, aggregation, cumulative, sampled, display-name) of a sample type of `kind`.
fn sample_type_config(
    kind: EventKind,
    ty: &str,
) -> (&'static str, &'static str, bool, bool, String) {
    match (kind, ty) {
        (EventKind::Cpu, "samples") => ("samples", "sum", false, true, "cpu".into()),
        (EventKind::OffCpu, "time") => ("nanoseconds", "sum", true, false, "block_time".into()),
        (_, "alloc_objects") => ("objects", "sum", true, false, "alloc_objects".into()),
        (_, "alloc_space") => ("bytes", "sum", true, false, "alloc_space".into()),
        (_, "inuse_objects") => ("objects", "average", false, false, "inuse_objects".into()),
        (_, "inuse_space") => ("bytes", "average", false, false, "inuse_space".into()),
        (EventKind::Lock, "contentions") => {
            ("lock_samples", "sum", true, false, "mutex_count".into())
        }
        (EventKind::Lock, "delay") => (
            "lock_nanoseconds",
            "sum",
            true,
            false,
            "mutex_duration".into(),
        ),
        (EventKind::Lock, "hold") => ("lock_nanoseconds", "sum", true, false, "mutex_hold".into()),
        (k, t) => {
            let unit = if t.ends_with("space") || t == "bytes" {
                "bytes"
            } else if matches!(t, "latency" | "delay" | "time") {
                "nanoseconds"
            } else {
                "count"
            };
            (unit, "sum", true, false, format!("{}_{t}", k.name()))
        }
    }
}

/// The `sample_type_config` JSON of a profile's sample types.
pub fn sample_types_json(kind: EventKind, p: &ebtrace_proto::pprof::Profile) -> String {
    let mut m = serde_json::Map::new();
    for st in &p.sample_type {
        let ty = p
            .string_table
            .get(st.r#type as usize)
            .cloned()
            .unwrap_or_default();
        let (units, aggregation, cumulative, sampled, display) = sample_type_config(kind, &ty);
        let mut c = serde_json::Map::new();
        c.insert("units".into(), units.into());
        c.insert("aggregation".into(), aggregation.into());
        if cumulative {
            c.insert("cumulative".into(), true.into());
        }
        if sampled {
            c.insert("sampled".into(), true.into());
        }
        c.insert("display-name".into(), display.into());
        m.insert(ty, serde_json::Value::Object(c));
    }
    serde_json::Value::Object(m).to_string()
}

/// A label value as Pyroscope's name parser takes it (no `,{}=` nor quotes).
fn value(v: &str) -> String {
    v.chars()
        .map(|c| if ",{}=\"\n".contains(c) { '_' } else { c })
        .collect()
}

/// Percent-encoding of a query value.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The application name with its labels: `SERVICE.KIND{service_name=…,host=…,…}`.
pub fn app_name(w: &Window, kind: EventKind) -> String {
    let labels: Vec<String> = w
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={}", value(v)))
        .collect();
    format!("{}.{}{{{}}}", w.service, kind.name(), labels.join(","))
}

fn boundary(body_parts: &[&[u8]]) -> String {
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
        | 1;
    loop {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let b = format!("ebrec-{seed:016x}{:016x}", seed.rotate_left(29));
        if !body_parts
            .iter()
            .any(|p| p.windows(b.len()).any(|w| w == b.as_bytes()))
        {
            return b;
        }
    }
}

/// A multipart/form-data body of (field, file name, content type, data): the body and its
/// Content-Type.
pub fn multipart(fields: &[(&str, &str, &str, &[u8])]) -> (Vec<u8>, String) {
    let datas: Vec<&[u8]> = fields.iter().map(|f| f.3).collect();
    let b = boundary(&datas);
    let mut body = Vec::new();
    for (name, file, ct, data) in fields {
        body.extend_from_slice(
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: {ct}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{b}--\r\n").as_bytes());
    (body, format!("multipart/form-data; boundary={b}"))
}

/// One request per kind.
pub fn requests(w: &Window) -> Vec<Request> {
    w.named
        .as_ref()
        .unwrap_or(&w.profiles)
        .iter()
        .map(|kp| {
            let config = sample_types_json(kp.kind, &kp.profile);
            let (body, content_type) = multipart(&[
                (
                    "profile",
                    "profile.pprof",
                    "application/octet-stream",
                    &kp.gz,
                ),
                (
                    "sample_type_config",
                    "sample_type_config.json",
                    "application/json",
                    config.as_bytes(),
                ),
            ]);
            let mut path = format!(
                "/ingest?name={}&from={}&until={}&spyName=ebrec",
                query_escape(&app_name(w, kp.kind)),
                w.from_ns / 1_000_000_000,
                w.until_ns.div_ceil(1_000_000_000),
            );
            if kp.kind == EventKind::Cpu && w.info.cpu_hz > 0 {
                path.push_str(&format!("&sampleRate={}", w.info.cpu_hz));
            }
            Request {
                what: kp.kind.name().to_string(),
                path,
                content_type,
                headers: Vec::new(),
                body,
            }
        })
        .collect()
}

/// A 2xx is taken (Pyroscope answers 200 with an empty body or `{}`).
pub fn judge(r: &Reply) -> Outcome {
    judge_status(r).unwrap_or(Outcome::Pushed)
}
