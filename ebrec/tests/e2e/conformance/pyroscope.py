#!/usr/bin/python3
"""A conformance server of Grafana Pyroscope's ingest API, from its code and docs
(docs/sources/reference-server-api, pkg/ingester/pyroscope/ingest_handler.go,
pkg/og/convert/pprof/profile.go, api/model/labelset): POST /ingest (or /pyroscope/ingest)

  query  name=APP{k=v,...} (required; the app name [A-Za-z0-9_./-]+, label names
         [A-Za-z0-9_.]+, `__name__` reserved), from/until (unix seconds; now if absent),
         sampleRate (an integer >= 0), spyName, units, aggregationType, format
  body   with format=pprof: the pprof itself (gzipped or not); without format and a
         multipart/form-data Content-Type: the form, field `profile` (the pprof),
         optional `sample_type_config` (JSON: {type: {units, aggregation, cumulative,
         sampled, display-name}}), `prev_profile` refused ("unsupported client version")

Answers 200 (empty body) when taken; 400 with the error text (as Pyroscope's
httputil.ErrorWithStatus) otherwise. Each accepted profile is written as
OUT/N.pb.gz with OUT/N.json: the query, the parsed labels, the __name__ Pyroscope derives
(`metricName`), the sample type config, and the profile's summary.
"""

import json
import re
import urllib.parse

import common

SAMPLE_TYPE_KEYS = {"units", "display-name", "aggregation", "cumulative", "sampled"}
DEFAULT_DISPLAY = {"samples": "cpu", "contentions": "mutex_count", "delay": "mutex_duration",
                   "goroutine": "goroutines"}


def parse_labelset(name):
    """labelset.Parse: NAME{k=v,...}."""
    labels = {}
    m = name.split("{", 1)
    service = m[0].strip()
    if not service:
        raise common.Refused("name: service name is required")
    for r in service:
        if not (r.isascii() and (r.isalnum() or r in "_.-/")):
            raise common.Refused("name: invalid service name: %s: character is not allowed: %r" % (service, r))
    labels["__name__"] = service
    if len(m) == 2:
        rest = m[1]
        body = rest.split("}", 1)[0]
        for kv in body.split(","):
            if not kv:
                continue
            if "=" not in kv:
                continue
            k, v = kv.split("=", 1)
            k = k.strip()
            if k != "__name__":
                if not k:
                    raise common.Refused("name: label name is required")
                for r in k:
                    if not (r.isascii() and (r.isalnum() or r in "_.")):
                        raise common.Refused("name: invalid label name: %s: character is not allowed: %r" % (k, r))
            labels[k] = v.strip()
    return labels


def parse_multipart(content_type, body):
    """Go's mime/multipart reading of a form: {field: bytes}."""
    mt, _, params = content_type.partition(";")
    if mt.strip().lower() != "multipart/form-data":
        raise common.Refused("failed to parse pprof /ingest multipart form: not multipart/form-data")
    boundary = None
    for p in params.split(";"):
        k, _, v = p.strip().partition("=")
        if k.lower() == "boundary":
            boundary = v.strip('"')
    if not boundary:
        raise common.Refused("failed to parse pprof /ingest multipart form: no multipart boundary param in Content-Type")
    delim = b"--" + boundary.encode()
    if not body.startswith(delim):
        raise common.Refused("failed to parse pprof /ingest multipart form: multipart: NextPart: EOF")
    out = {}
    pos = len(delim)
    while True:
        if body[pos:pos + 2] == b"--":
            break
        if body[pos:pos + 2] != b"\r\n":
            raise common.Refused("failed to parse pprof /ingest multipart form: bad boundary line")
        pos += 2
        end_headers = body.find(b"\r\n\r\n", pos)
        if end_headers < 0:
            raise common.Refused("failed to parse pprof /ingest multipart form: malformed MIME header")
        headers = {}
        for line in body[pos:end_headers].split(b"\r\n"):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        pos = end_headers + 4
        nxt = body.find(b"\r\n" + delim, pos)
        if nxt < 0:
            raise common.Refused("failed to parse pprof /ingest multipart form: unexpected EOF")
        data = body[pos:nxt]
        pos = nxt + 2 + len(delim)
        disp = headers.get("content-disposition", "")
        m = re.search(r'(?:^|;)\s*name="([^"]*)"', disp)
        if not disp.startswith("form-data") or not m:
            continue
        out[m.group(1)] = data
    return out


def metric_name(types, config):
    """pprof.RawProfile.metricName."""
    for t in types:
        if t == "wall":
            return t
    st = ""
    for t in types:
        st = t
        c = config.get(t) if config is not None else None
        if c is not None and c.get("display-name"):
            st = c["display-name"]
        elif config is None and t in DEFAULT_DISPLAY:
            st = DEFAULT_DISPLAY[t]
        if "cpu" in st:
            return "process_cpu"
        if "alloc_" in st or "inuse_" in st or st in ("space", "objects"):
            return "memory"
        if "mutex_" in st:
            return "mutex"
        if "block_" in st:
            return "block"
        if "goroutines" in st:
            return "goroutines"
    return st


def handle(h, n, store):
    url = urllib.parse.urlsplit(h.path)
    if url.path not in ("/ingest", "/pyroscope/ingest"):
        raise common.Refused("404 page not found", 404)
    q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    get = lambda k: q.get(k, [""])[0]
    labels = parse_labelset(get("name"))
    for k in ("from", "until"):
        if get(k) and not re.fullmatch(r"\d+", get(k)):
            raise common.Refused("%s: not unix seconds: %r" % (k, get(k)))
    if get("from") and get("until") and int(get("from")) > int(get("until")):
        raise common.Refused("from is after until")
    sample_rate = get("sampleRate")
    if sample_rate and not re.fullmatch(r"\d+", sample_rate):
        raise common.Refused("invalid sample rate: %r" % sample_rate)
    fmt = get("format")
    ct = h.headers.get("Content-Type", "")
    config = None
    if fmt == "pprof":
        profile = h.raw  # the body is the profile itself
    elif fmt == "" and "multipart/form-data" in ct:
        form = parse_multipart(ct, h.raw)
        if "prev_profile" in form:
            raise common.Refused("unsupported client version. Please update github.com/grafana/pyroscope-go to the latest version")
        profile = form.get("profile", b"")
        if "sample_type_config" in form:
            try:
                config = json.loads(form["sample_type_config"])
            except ValueError as e:
                raise common.Refused("failed to parse pprof /ingest multipart form: %s" % e)
            if not isinstance(config, dict):
                raise common.Refused("sample_type_config: not an object")
            for t, c in config.items():
                if not isinstance(c, dict) or not set(c) <= SAMPLE_TYPE_KEYS:
                    raise common.Refused("sample_type_config %r: unknown keys %s" % (t, sorted(set(c) - SAMPLE_TYPE_KEYS)))
                if c.get("aggregation", "sum") not in ("sum", "average"):
                    raise common.Refused("sample_type_config %r: aggregation %r" % (t, c["aggregation"]))
    else:
        raise common.Refused("format %r with Content-Type %r: not a pprof upload" % (fmt, ct))
    if not profile:
        raise common.Refused("empty profile")
    try:
        p = common.parse_pprof(profile)
    except common.DecodeError as e:
        raise common.Refused("failed to parse pprof: %s" % e)
    st = p["string_table"]
    types = [st[t["type"]] for t in p["sample_type"]]
    k = store.next_accepted()
    store.write("%d.pb.gz" % k, profile if profile[:2] == b"\x1f\x8b" else __import__("gzip").compress(profile))
    meta = {
        "request": n,
        "query": {k2: v[0] for k2, v in q.items()},
        "labels": labels,
        "metric_name": metric_name(types, config),
        "sample_type_config": config,
        "summary": common.pprof_summary(p),
    }
    store.write("%d.json" % k, json.dumps(meta, indent=1))
    return 200, [("Content-Type", "application/json")], b""


def refuse(h, message, status, exc=None):
    return status, [("Content-Type", "text/plain; charset=utf-8")], (message + "\n").encode()


if __name__ == "__main__":
    common.serve("Pyroscope /ingest conformance server", handle, refuse)
