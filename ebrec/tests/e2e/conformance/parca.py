#!/usr/bin/python3
"""A conformance server of Parca's ProfileStoreService.WriteRaw over gRPC-Web, from
parca-dev/parca: proto/parca/profilestore/v1alpha1/profilestore.proto, pkg/server
(improbable-eng grpcweb wrapping the gRPC server for `application/grpc*` requests),
pkg/normalizer (NormalizeWriteRawRequest, ValidatePprofProfile).

  POST /parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw
  Content-Type application/grpc-web or application/grpc-web+proto (the -text, base64,
  variant is not what ebrec sends and is refused here)
  body: one 5-byte-framed message (flag 0: not compressed), a WriteRawRequest

Checks as the normalizer does: every series has a `__name__` label, label names are valid
Prometheus names and not repeated; each raw sample is a pprof (gzipped or not) that
passes ValidatePprofProfile; executable_info, when given, has one entry per mapping.

Answers HTTP 200, `application/grpc-web+proto`, a WriteRawResponse frame and the trailer
frame `grpc-status:0`; a refused request gets a trailers-only answer (HTTP 200 with
`grpc-status` 3 InvalidArgument, or 12 Unimplemented for another method, and
`grpc-message`, percent-encoded, in the headers), as grpc-web does. Accepted raw samples
are written as OUT/N.pb.gz with OUT/N.json (the series' labels, `normalized`, summary).
"""

import gzip
import json
import re
import struct
import urllib.parse

import common

PATH = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

SCHEMA = {
    "WriteRawRequest": {1: ("tenant", "string", False), 2: ("series", "RawProfileSeries", True),
                        3: ("normalized", "bool", False)},
    "RawProfileSeries": {1: ("labels", "LabelSet", False), 2: ("samples", "RawSample", True)},
    "LabelSet": {1: ("labels", "Label", True)},
    "Label": {1: ("name", "string", False), 2: ("value", "string", False)},
    "RawSample": {1: ("raw_profile", "bytes", False), 2: ("executable_info", "ExecutableInfo", True)},
    "ExecutableInfo": {1: ("elf_type", "uint32", False), 2: ("load_segment", "LoadSegment", False)},
    "LoadSegment": {1: ("offset", "uint64", False), 2: ("vaddr", "uint64", False)},
}

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class GrpcError(common.Refused):
    def __init__(self, code, message):
        super().__init__(message, 400)
        self.code = code


def frames(body):
    out = []
    i = 0
    while i < len(body):
        if i + 5 > len(body):
            raise GrpcError(13, "grpc: malformed frame header")
        flag = body[i]
        (n,) = struct.unpack(">I", body[i + 1:i + 5])
        if i + 5 + n > len(body):
            raise GrpcError(13, "grpc: frame longer than the body")
        out.append((flag, body[i + 5:i + 5 + n]))
        i += 5 + n
    return out


def handle(h, n, store):
    ct = h.headers.get("Content-Type", "")
    if not ct.startswith("application/grpc"):
        raise common.Refused("not found (not a gRPC request)", 404)
    if ct not in ("application/grpc-web", "application/grpc-web+proto"):
        raise GrpcError(13, "unsupported content type %r" % ct)
    if h.path != PATH:
        raise GrpcError(12, "unknown method %s" % h.path)
    fs = frames(h.raw)
    if len(fs) != 1 or fs[0][0] & 0x80:
        raise GrpcError(13, "grpc: expected one message frame, got %d frames" % len(fs))
    flag, msg = fs[0]
    if flag & 1:
        raise GrpcError(13, "grpc: compressed message without grpc-encoding")
    try:
        req = common.decode(SCHEMA, "WriteRawRequest", msg)
    except common.DecodeError as e:
        raise GrpcError(13, "grpc: error unmarshalling request: %s" % e)
    stored = []
    for series in req["series"]:
        labels = {}
        name = ""
        for l in (series["labels"] or {"labels": []})["labels"]:
            if l["name"] == "__name__":
                name = l["value"]
                continue
            if not LABEL_NAME.match(l["name"]):
                raise GrpcError(3, "invalid label name: %s" % l["name"])
            if l["name"] in labels:
                raise GrpcError(3, "duplicate label name: %s" % l["name"])
            labels[l["name"]] = l["value"]
        if not name:
            raise GrpcError(3, "missing __name__ label")
        for s in series["samples"]:
            raw = s["raw_profile"]
            try:
                p = common.decode(common.PPROF, "Profile", common.gunzip_maybe(raw))
            except common.DecodeError as e:
                raise GrpcError(3, "failed to parse profile: %s" % e)
            try:
                common.validate_pprof(p)
            except common.DecodeError as e:
                raise GrpcError(3, "invalid profile: %s" % e)
            if s["executable_info"] and len(s["executable_info"]) != len(p["mapping"]):
                raise GrpcError(3, "invalid profile: profile has %d mappings but %d executable infos"
                                % (len(p["mapping"]), len(s["executable_info"])))
            stored.append((name, labels, raw, p))
    for name, labels, raw, p in stored:
        k = store.next_accepted()
        store.write("%d.pb.gz" % k, raw if raw[:2] == b"\x1f\x8b" else gzip.compress(raw))
        store.write("%d.json" % k, json.dumps({
            "request": n, "name": name, "labels": labels, "normalized": req["normalized"],
            "summary": common.pprof_summary(p)}, indent=1))
    body = struct.pack(">BI", 0, 0) + b""
    trailer = b"grpc-status:0\r\ngrpc-message:\r\n"
    body += struct.pack(">BI", 0x80, len(trailer)) + trailer
    return 200, [("Content-Type", "application/grpc-web+proto"),
                 ("Access-Control-Expose-Headers", "grpc-status, grpc-message")], body


def refuse(h, message, status, exc=None):
    if status == 404:
        return 404, [("Content-Type", "text/plain")], b"404 page not found\n"
    code = exc.code if isinstance(exc, GrpcError) else 3
    return 200, [("Content-Type", "application/grpc-web+proto"),
                 ("grpc-status", str(code)),
                 ("grpc-message", urllib.parse.quote(message, safe=" :/,()"))], b""


if __name__ == "__main__":
    common.serve("Parca WriteRaw (gRPC-Web) conformance server", handle, refuse)
