"""Shared parts of the conformance servers (pyroscope.py, parca.py, otlp.py): a protobuf
wire-format decoder driven by schemas written from the published .proto files, pprof's
schema and the checks a backend makes of a pprof profile, the HTTP server with its
misbehaviours, and where the accepted requests go.

Standard library only (Debian's python3): no generated classes, no protoc.

Every server takes:
  --out DIR        accepted payloads are written here (see each server), and log.jsonl:
                   one line per request {"n", "path", "fault", "status", "error"}
  --faults LIST    comma-separated misbehaviours for the first requests, in order:
                   503 (answer 503), hang (read the request, then sleep --hang-secs
                   before closing without answering), reset (read the request, then
                   reset the connection), garbage (answer bytes that are not HTTP),
                   400 (refuse the request as invalid, the backend's way), ok (behave)
  --hang-secs S    how long a hang lasts (default 60)
  --tls-cert PEM --tls-key PEM   serve HTTPS
and prints `LISTENING PORT` on stdout once it listens on 127.0.0.1 (port 0: any).
"""

import argparse
import gzip
import http.server
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time

# --- protobuf wire format -------------------------------------------------------------

VARINT, I64, LEN, I32 = 0, 1, 2, 5


class DecodeError(Exception):
    pass


def read_varint(b, i):
    shift = 0
    v = 0
    while True:
        if i >= len(b):
            raise DecodeError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
        if shift >= 70:
            raise DecodeError("varint too long")


def fields(b):
    """(field number, wire type, value) of every field of a message's bytes."""
    i = 0
    out = []
    while i < len(b):
        key, i = read_varint(b, i)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise DecodeError("field number 0")
        if wt == VARINT:
            v, i = read_varint(b, i)
        elif wt == I64:
            if i + 8 > len(b):
                raise DecodeError("truncated fixed64")
            v = b[i:i + 8]
            i += 8
        elif wt == LEN:
            n, i = read_varint(b, i)
            if i + n > len(b):
                raise DecodeError("truncated length-delimited field %d" % num)
            v = b[i:i + n]
            i += n
        elif wt == I32:
            if i + 4 > len(b):
                raise DecodeError("truncated fixed32")
            v = b[i:i + 4]
            i += 4
        else:
            raise DecodeError("wire type %d" % wt)
        out.append((num, wt, v))
    return out


SCALARS = {"uint64", "uint32", "int64", "int32", "bool", "enum", "fixed64", "sfixed64",
           "fixed32", "double", "string", "bytes"}


def scalar(t, wt, v):
    if t in ("uint64", "uint32", "int64", "int32", "bool", "enum"):
        if wt != VARINT:
            raise DecodeError("%s with wire type %d" % (t, wt))
        if t == "int64" and v >= 1 << 63:
            v -= 1 << 64
        if t in ("int32", "enum") and v >= 1 << 63:
            v -= 1 << 64
        if t == "uint32":
            v &= 0xFFFFFFFF
        if t == "bool":
            v = bool(v)
        return v
    if t in ("fixed64", "sfixed64", "double"):
        if wt != I64:
            raise DecodeError("%s with wire type %d" % (t, wt))
        return struct.unpack("<" + {"fixed64": "Q", "sfixed64": "q", "double": "d"}[t], v)[0]
    if t == "fixed32":
        if wt != I32:
            raise DecodeError("fixed32 with wire type %d" % wt)
        return struct.unpack("<I", v)[0]
    if t == "string":
        if wt != LEN:
            raise DecodeError("string with wire type %d" % wt)
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("string field is not UTF-8")
    if t == "bytes":
        if wt != LEN:
            raise DecodeError("bytes with wire type %d" % wt)
        return bytes(v)
    raise DecodeError("type " + t)


def decode(schemas, name, b):
    """Message `name` of `schemas` ({message: {number: (field, type, repeated)}}) from
    bytes, as a dict with every field (defaults for absent ones). Unknown fields are
    skipped, as protobuf does; a field of the wrong wire type is an error."""
    schema = schemas[name]
    out = {}
    for num, (fname, t, rep) in schema.items():
        out[fname] = [] if rep else (None if t not in SCALARS else default(t))
    for num, wt, v in fields(b):
        if num not in schema:
            continue
        fname, t, rep = schema[num]
        if t in SCALARS:
            if rep and wt == LEN and t not in ("string", "bytes"):
                # packed
                j = 0
                while j < len(v):
                    if t in ("fixed64", "sfixed64", "double"):
                        out[fname].append(scalar(t, I64, v[j:j + 8]))
                        j += 8
                    elif t == "fixed32":
                        out[fname].append(scalar(t, I32, v[j:j + 4]))
                        j += 4
                    else:
                        x, j = read_varint(v, j)
                        out[fname].append(scalar(t, VARINT, x))
                continue
            x = scalar(t, wt, v)
        else:
            if wt != LEN:
                raise DecodeError("message %s.%s with wire type %d" % (name, fname, wt))
            x = decode(schemas, t, v)
        if rep:
            out[fname].append(x)
        else:
            out[fname] = x
    return out


def default(t):
    if t == "string":
        return ""
    if t == "bytes":
        return b""
    if t == "bool":
        return False
    if t == "double":
        return 0.0
    return 0


# --- pprof (perftools.profiles, profile.proto) ----------------------------------------

PPROF = {
    "Profile": {
        1: ("sample_type", "ValueType", True), 2: ("sample", "Sample", True),
        3: ("mapping", "Mapping", True), 4: ("location", "Location", True),
        5: ("function", "Function", True), 6: ("string_table", "string", True),
        7: ("drop_frames", "int64", False), 8: ("keep_frames", "int64", False),
        9: ("time_nanos", "int64", False), 10: ("duration_nanos", "int64", False),
        11: ("period_type", "ValueType", False), 12: ("period", "int64", False),
        13: ("comment", "int64", True), 14: ("default_sample_type", "int64", False),
    },
    "ValueType": {1: ("type", "int64", False), 2: ("unit", "int64", False)},
    "Sample": {1: ("location_id", "uint64", True), 2: ("value", "int64", True),
               3: ("label", "Label", True)},
    "Label": {1: ("key", "int64", False), 2: ("str", "int64", False),
              3: ("num", "int64", False), 4: ("num_unit", "int64", False)},
    "Mapping": {1: ("id", "uint64", False), 2: ("memory_start", "uint64", False),
                3: ("memory_limit", "uint64", False), 4: ("file_offset", "uint64", False),
                5: ("filename", "int64", False), 6: ("build_id", "int64", False),
                7: ("has_functions", "bool", False), 8: ("has_filenames", "bool", False),
                9: ("has_line_numbers", "bool", False),
                10: ("has_inline_frames", "bool", False)},
    "Location": {1: ("id", "uint64", False), 2: ("mapping_id", "uint64", False),
                 3: ("address", "uint64", False), 4: ("line", "Line", True),
                 5: ("is_folded", "bool", False)},
    "Line": {1: ("function_id", "uint64", False), 2: ("line", "int64", False)},
    "Function": {1: ("id", "uint64", False), 2: ("name", "int64", False),
                 3: ("system_name", "int64", False), 4: ("filename", "int64", False),
                 5: ("start_line", "int64", False)},
}


def gunzip_maybe(b):
    if len(b) >= 2 and b[0] == 0x1F and b[1] == 0x8B:
        try:
            return gzip.decompress(b)
        except (OSError, EOFError) as e:
            raise DecodeError("decompressing profile: %s" % e)
    return b


def validate_pprof(p):
    """Parca's normalizer.ValidatePprofProfile (pkg/normalizer/validate.go), which
    Pyroscope's checks are a subset of."""
    st = p["string_table"]
    n = len(st)
    if n > 0 and st[0] != "":
        raise DecodeError("first item in string table is expected to be empty string, but it is %r" % st[0])
    for i, m in enumerate(p["mapping"]):
        if m["id"] != i + 1:
            raise DecodeError("mapping id is not sequential")
        if m["filename"] != 0 and m["filename"] >= n:
            raise DecodeError("mapping (id: %d) has invalid filename index %d" % (m["id"], m["filename"]))
        if m["build_id"] != 0 and m["build_id"] >= n:
            raise DecodeError("mapping (id: %d) has invalid buildid index" % m["id"])
    for i, f in enumerate(p["function"]):
        if f["id"] != i + 1:
            raise DecodeError("function id is not sequential")
        for k in ("name", "system_name", "filename"):
            if f[k] != 0 and f[k] >= n:
                raise DecodeError("function (id: %d) has invalid %s index" % (f["id"], k))
    for i, l in enumerate(p["location"]):
        if l["id"] != i + 1:
            raise DecodeError("location id is not sequential")
        if l["mapping_id"] != 0 and l["mapping_id"] > len(p["mapping"]):
            raise DecodeError("location has invalid mapping id: %d" % l["mapping_id"])
        for ln in l["line"]:
            if ln["function_id"] != 0 and ln["function_id"] > len(p["function"]):
                raise DecodeError("location %d has invalid function id" % l["id"])
    if not p["sample_type"] and p["sample"]:
        raise DecodeError("missing sample type information")
    for i, t in enumerate(p["sample_type"]):
        for k in ("type", "unit"):
            if t[k] != 0 and t[k] >= n:
                raise DecodeError("sample type %d has invalid %s index" % (i, k))
    if p["period_type"] is not None:
        for k in ("type", "unit"):
            if p["period_type"][k] != 0 and p["period_type"][k] >= n:
                raise DecodeError("period type has invalid %s index" % k)
    for i, s in enumerate(p["sample"]):
        if len(s["value"]) != len(p["sample_type"]):
            raise DecodeError("mismatch: sample has %d values vs. %d types" % (len(s["value"]), len(p["sample_type"])))
        for j, l in enumerate(s["location_id"]):
            if l == 0:
                raise DecodeError("location ids of stacktraces must be non-zero")
            if l > len(p["location"]):
                raise DecodeError("sample %d location number %d (%d) is out of range" % (i, j, l))
        for j, lb in enumerate(s["label"]):
            if lb["key"] == 0:
                raise DecodeError("sample %d label %d has no key" % (i, j))
            if lb["key"] >= n:
                raise DecodeError("sample %d label %d has invalid key index" % (i, j))
            if lb["str"] != 0 and lb["str"] >= n:
                raise DecodeError("sample %d label %d has invalid str index" % (i, j))
    return p


def parse_pprof(raw):
    p = decode(PPROF, "Profile", gunzip_maybe(raw))
    return validate_pprof(p)


def pprof_summary(p):
    """What the tests read of a profile: sample types, totals per type, mappings with
    build-ids, function names, sample labels."""
    st = p["string_table"]
    types = ["%s/%s" % (st[t["type"]], st[t["unit"]]) for t in p["sample_type"]]
    totals = [0] * len(types)
    labels = set()
    for s in p["sample"]:
        for i, v in enumerate(s["value"]):
            totals[i] += v
        for lb in s["label"]:
            labels.add((st[lb["key"]], st[lb["str"]]))
    return {
        "sample_types": types,
        "totals": totals,
        "samples": len(p["sample"]),
        "mappings": [{"file": st[m["filename"]], "build_id": st[m["build_id"]],
                      "start": m["memory_start"], "limit": m["memory_limit"],
                      "offset": m["file_offset"]} for m in p["mapping"]],
        "functions": sorted({st[f["name"]] for f in p["function"]}),
        "locations_without_lines": sum(1 for l in p["location"] if not l["line"]),
        "locations": len(p["location"]),
        "labels": sorted([k, v] for k, v in labels),
    }


# --- the server -----------------------------------------------------------------------


class Store:
    def __init__(self, out):
        self.out = out
        os.makedirs(out, exist_ok=True)
        self.lock = threading.Lock()
        self.n = 0
        self.accepted = 0

    def next(self):
        with self.lock:
            self.n += 1
            return self.n

    def next_accepted(self):
        with self.lock:
            self.accepted += 1
            return self.accepted

    def log(self, entry):
        with self.lock:
            with open(os.path.join(self.out, "log.jsonl"), "a") as f:
                f.write(json.dumps(entry) + "\n")

    def write(self, name, data):
        path = os.path.join(self.out, name)
        mode = "wb" if isinstance(data, (bytes, bytearray)) else "w"
        with open(path + ".tmp", mode) as f:
            f.write(data)
        os.rename(path + ".tmp", path)


class Refused(Exception):
    """The request is invalid: the backend's own error answer."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def arguments(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--faults", default="")
    ap.add_argument("--hang-secs", type=float, default=60.0)
    ap.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (and --tls-key)")
    ap.add_argument("--tls-key")
    return ap.parse_args()


def serve(description, handle, refuse):
    """Runs the server. `handle(handler, n, store)` validates one request and returns
    (status, headers, body) or raises Refused; `refuse(handler, message, status, exc)`
    returns the backend's error answer (its `400` fault too, with exc None)."""
    args = arguments(description)
    store = Store(args.out)
    faults = [f for f in args.faults.split(",") if f]
    for f in faults:
        if f not in ("503", "hang", "reset", "garbage", "400", "ok"):
            sys.exit("unknown fault %r" % f)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while True:
                    line = self.rfile.readline()
                    size = int(line.split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            n = self.headers.get("Content-Length")
            if n is None:
                raise Refused("length required", 411)
            return self.rfile.read(int(n))

        def answer(self, status, headers, body):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def do_GET(self):
            self.answer(405, [("Content-Type", "text/plain")], b"method not allowed\n")

        def do_POST(self):
            n = store.next()
            fault = faults[n - 1] if n <= len(faults) else "ok"
            entry = {"n": n, "path": self.path, "fault": fault,
                     "content_type": self.headers.get("Content-Type", ""),
                     "authorization": self.headers.get("Authorization", ""),
                     "tenant": self.headers.get("X-Scope-OrgID", "")}
            try:
                self.raw = self.body()
            except Refused as e:
                entry.update(status=e.status, error=str(e))
                store.log(entry)
                self.answer(*refuse(self, str(e), e.status, None))
                return
            if fault == "503":
                entry["status"] = 503
                store.log(entry)
                self.answer(503, [("Content-Type", "text/plain")], b"upstream unavailable (fault)\n")
                return
            if fault == "hang":
                entry["status"] = "hang"
                store.log(entry)
                time.sleep(args.hang_secs)
                self.close_connection = True
                return
            if fault == "reset":
                entry["status"] = "reset"
                store.log(entry)
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            if fault == "garbage":
                entry["status"] = "garbage"
                store.log(entry)
                self.wfile.write(b"\x00\x17\xff garbage, not HTTP at all\r\n\r\n\x01\x02")
                self.wfile.flush()
                self.close_connection = True
                return
            if fault == "400":
                entry.update(status=400, error="refused (fault)")
                store.log(entry)
                self.answer(*refuse(self, "invalid request (fault): bad profile", 400, None))
                return
            try:
                status, headers, body = handle(self, n, store)
                entry["status"] = status
                store.log(entry)
                self.answer(status, headers, body)
            except (Refused, DecodeError) as e:
                status = getattr(e, "status", 400)
                entry.update(status=status, error=str(e))
                store.log(entry)
                self.answer(*refuse(self, str(e), status, e))

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("LISTENING %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
