//! Parca's `parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw` (the vendored
//! `proto/parca/profilestore/v1alpha1/profilestore.proto`): one request per window, a
//! series per kind with its labels (`__name__` `ebrec_KIND`, service_name, host, kernel,
//! the configured ones) and the gzipped pprof as its one raw sample; `normalized: false`
//! (the addresses are the process's, Parca normalizes them with the mappings).
//!
//! gRPC-Web, not gRPC: Parca serves both on its one port (pkg/server wraps its gRPC
//! server with improbable-eng's grpcweb for any `application/grpc*` request), and gRPC-Web
//! is plain HTTP/1.1 — a POST of `application/grpc-web+proto` whose body is the 5-byte
//! framed message, the answer's messages and then its trailers (`grpc-status`,
//! `grpc-message`) framed in the body (flag 0x80), or in the headers when there is no
//! message. So the same small blocking client (ureq, rustls) serves all three backends,
//! with no HTTP/2 stack, tonic or async runtime in the recorder.
use super::{judge_status, Outcome, Reply, Request, Window};
use ebtrace_proto::parca::{Label, LabelSet, RawProfileSeries, RawSample, WriteRawRequest};
use prost::Message;

pub const PATH: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw";

/// The WriteRaw request of a window.
pub fn write_raw(w: &Window) -> WriteRawRequest {
    WriteRawRequest {
        series: w
            .profiles
            .iter()
            .map(|kp| {
                let mut labels = vec![Label {
                    name: "__name__".into(),
                    value: format!("ebrec_{}", kp.kind.name()),
                }];
                labels.extend(w.labels.iter().map(|(k, v)| Label {
                    name: k.clone(),
                    value: v.clone(),
                }));
                RawProfileSeries {
                    labels: Some(LabelSet { labels }),
                    samples: vec![RawSample {
                        raw_profile: kp.gz.clone(),
                        executable_info: Vec::new(),
                    }],
                }
            })
            .collect(),
        normalized: false,
        ..Default::default()
    }
}

/// A gRPC(-Web) frame: flag, big-endian length, message.
pub fn frame(flag: u8, msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(flag);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

pub fn requests(w: &Window) -> Vec<Request> {
    if w.profiles.is_empty() {
        return Vec::new();
    }
    vec![Request {
        what: "window".into(),
        path: PATH.into(),
        content_type: "application/grpc-web+proto".into(),
        headers: vec![("X-Grpc-Web".into(), "1".into())],
        body: frame(0, &write_raw(w).encode_to_vec()),
    }]
}

/// gRPC status codes worth another try: UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
/// ABORTED, INTERNAL, UNAVAILABLE.
fn retryable(code: u32) -> bool {
    matches!(code, 2 | 4 | 8 | 10 | 13 | 14)
}

/// The trailers of a gRPC-Web answer: from its body's trailer frame, else its headers
/// (a trailers-only answer). Err: the body is not gRPC-Web frames.
fn trailers(r: &Reply) -> Result<Vec<(String, String)>, String> {
    let mut b = &r.body[..];
    let mut found = None;
    while !b.is_empty() {
        if b.len() < 5 {
            return Err(format!("a {}-byte piece of a frame", b.len()));
        }
        let flag = b[0];
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        if b.len() < 5 + len {
            return Err(format!("a frame of {len} bytes cut at {}", b.len() - 5));
        }
        let msg = &b[5..5 + len];
        match flag {
            0 => {
                if ebtrace_proto::parca::WriteRawResponse::decode(msg).is_err() {
                    return Err("a message that is not a WriteRawResponse".into());
                }
            }
            0x80 => {
                let text = std::str::from_utf8(msg).map_err(|_| "trailers not UTF-8")?;
                found = Some(
                    text.split("\r\n")
                        .filter(|l| !l.is_empty())
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                        .collect(),
                );
            }
            f => return Err(format!("a frame with flags {f:#x}")),
        }
        b = &b[5 + len..];
    }
    Ok(found.unwrap_or_else(|| {
        r.headers
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().starts_with("grpc-"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect()
    }))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn judge(r: &Reply) -> Outcome {
    if let Some(o) = judge_status(r) {
        return o;
    }
    let ct = r.header("content-type").unwrap_or("");
    if !ct.starts_with("application/grpc-web") {
        return Outcome::Retry(format!(
            "not a gRPC-Web answer (Content-Type {ct:?}): {}",
            r.message()
        ));
    }
    let t = match trailers(r) {
        Ok(t) => t,
        Err(e) => return Outcome::Retry(format!("garbled gRPC-Web answer: {e}")),
    };
    let get = |k: &str| t.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some(status) = get("grpc-status") else {
        return Outcome::Retry("gRPC-Web answer without grpc-status".into());
    };
    let Ok(code) = status.parse::<u32>() else {
        return Outcome::Retry(format!("grpc-status {status:?}"));
    };
    if code == 0 {
        return Outcome::Pushed;
    }
    let msg = format!(
        "grpc-status {code}: {}",
        super::one_line(&percent_decode(get("grpc-message").unwrap_or("")), 300)
    );
    if retryable(code) {
        Outcome::Retry(msg)
    } else {
        Outcome::Drop(msg)
    }
}
