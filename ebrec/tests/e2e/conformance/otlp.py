#!/usr/bin/python3
"""A conformance server of OTLP/HTTP profiles, opentelemetry-proto release v1.11.0
(opentelemetry/proto/collector/profiles/v1development, the OTLP/HTTP spec):

  POST /v1development/profiles, Content-Type application/x-protobuf (application/json is
  OTLP too, but not what ebrec sends: 415 here), Content-Encoding gzip allowed;
  body: ExportProfilesServiceRequest

Checks what the profiles.proto comments require (MUST): the dictionary is present, each of
its tables has the zero value at index 0 (string_table[0] == ""), every index into a table
is in range, a Profile has a sample_type, each sample has one value per sample type (or
none, with timestamps), a Profile's, Sample's, Mapping's, Location's attribute_indices
have unique keys; resource attributes have unique keys.

Answers 200 with an (empty) ExportProfilesServiceResponse, `application/x-protobuf`; a
refused request 400 with a google.rpc.Status (code 3, message), as the collector's
receiver does. Each accepted request is written as OUT/N.json: the resource attributes,
and per profile its sample type, totals, samples with their stack resolved (function
names where the locations have lines; else the address with the mapping's file and
build-id) and attributes.
"""

import gzip
import json
import struct

import common

S = "string"
SCHEMA = {
    "ExportProfilesServiceRequest": {1: ("resource_profiles", "ResourceProfiles", True),
                                     2: ("dictionary", "ProfilesDictionary", False)},
    "ProfilesDictionary": {1: ("mapping_table", "Mapping", True), 2: ("location_table", "Location", True),
                           3: ("function_table", "Function", True), 4: ("link_table", "Link", True),
                           5: ("string_table", S, True), 6: ("attribute_table", "KeyValueAndUnit", True),
                           7: ("stack_table", "Stack", True)},
    "ResourceProfiles": {1: ("resource", "Resource", False), 2: ("scope_profiles", "ScopeProfiles", True),
                         3: ("schema_url", S, False)},
    "Resource": {1: ("attributes", "KeyValue", True), 2: ("dropped_attributes_count", "uint32", False)},
    "ScopeProfiles": {1: ("scope", "InstrumentationScope", False), 2: ("profiles", "Profile", True),
                      3: ("schema_url", S, False)},
    "InstrumentationScope": {1: ("name", S, False), 2: ("version", S, False),
                             3: ("attributes", "KeyValue", True)},
    "KeyValue": {1: ("key", S, False), 2: ("value", "AnyValue", False)},
    "AnyValue": {1: ("string_value", S, False), 2: ("bool_value", "bool", False),
                 3: ("int_value", "int64", False), 4: ("double_value", "double", False),
                 7: ("bytes_value", "bytes", False)},
    "Profile": {1: ("sample_type", "ValueType", False), 2: ("samples", "Sample", True),
                3: ("time_unix_nano", "fixed64", False), 4: ("duration_nano", "uint64", False),
                5: ("period_type", "ValueType", False), 6: ("period", "int64", False),
                7: ("profile_id", "bytes", False), 8: ("dropped_attributes_count", "uint32", False),
                9: ("original_payload_format", S, False), 10: ("original_payload", "bytes", False),
                11: ("attribute_indices", "int32", True)},
    "Link": {1: ("trace_id", "bytes", False), 2: ("span_id", "bytes", False)},
    "ValueType": {1: ("type_strindex", "int32", False), 2: ("unit_strindex", "int32", False)},
    # v1.11.0 numbering (v1.9.0 had values = 2).
    "Sample": {1: ("stack_index", "int32", False), 2: ("attribute_indices", "int32", True),
               3: ("link_index", "int32", False), 4: ("values", "int64", True),
               5: ("timestamps_unix_nano", "fixed64", True)},
    "Mapping": {1: ("memory_start", "uint64", False), 2: ("memory_limit", "uint64", False),
                3: ("file_offset", "uint64", False), 4: ("filename_strindex", "int32", False),
                5: ("attribute_indices", "int32", True)},
    "Stack": {1: ("location_indices", "int32", True)},
    "Location": {1: ("mapping_index", "int32", False), 2: ("address", "uint64", False),
                 3: ("lines", "Line", True), 4: ("attribute_indices", "int32", True)},
    "Line": {1: ("function_index", "int32", False), 2: ("line", "int64", False),
             3: ("column", "int64", False)},
    "Function": {1: ("name_strindex", "int32", False), 2: ("system_name_strindex", "int32", False),
                 3: ("filename_strindex", "int32", False), 4: ("start_line", "int64", False)},
    "KeyValueAndUnit": {1: ("key_strindex", "int32", False), 2: ("value", "AnyValue", False),
                        3: ("unit_strindex", "int32", False)},
}


def bad(msg):
    raise common.Refused(msg, 400)


def is_zero(msg):
    """Whether a decoded message is its type's zero value."""
    for v in msg.values():
        if isinstance(v, list):
            if v:
                return False
        elif isinstance(v, dict):
            if not is_zero(v):
                return False
        elif isinstance(v, bytes):
            if any(v):
                return False
        elif v:
            return False
    return True


def any_value(v):
    if v is None:
        return None
    for k in ("string_value", "int_value", "bool_value", "double_value"):
        if v[k]:
            return v[k]
    return v["string_value"]


def check(req):
    d = req["dictionary"]
    if d is None:
        bad("the request has no dictionary")
    tables = ("mapping_table", "location_table", "function_table", "link_table",
              "attribute_table", "stack_table", "string_table")
    for t in tables:
        if not d[t]:
            bad("dictionary.%s[0] MUST be present" % t)
    if d["string_table"][0] != "":
        bad('dictionary.string_table[0] MUST be ""')
    for t in tables[:-1]:
        if not is_zero(d[t][0]):
            bad("dictionary.%s[0] MUST be the zero value" % t)
    nstr = len(d["string_table"])

    def idx(i, table, what):
        if not 0 <= i < len(d[table]):
            bad("%s: index %d out of %s (%d entries)" % (what, i, table, len(d[table])))

    def sidx(i, what):
        if not 0 <= i < nstr:
            bad("%s: string index %d out of range" % (what, i))

    def attrs(indices, what):
        keys = set()
        for a in indices:
            idx(a, "attribute_table", what)
            k = d["attribute_table"][a]["key_strindex"]
            if k in keys:
                bad("%s: attribute key %r repeated" % (what, d["string_table"][k]))
            keys.add(k)

    for i, m in enumerate(d["mapping_table"]):
        sidx(m["filename_strindex"], "mapping %d" % i)
        attrs(m["attribute_indices"], "mapping %d" % i)
    for i, f in enumerate(d["function_table"]):
        for k in ("name_strindex", "system_name_strindex", "filename_strindex"):
            sidx(f[k], "function %d" % i)
    for i, l in enumerate(d["location_table"]):
        idx(l["mapping_index"], "mapping_table", "location %d" % i)
        for ln in l["lines"]:
            idx(ln["function_index"], "function_table", "location %d line" % i)
        attrs(l["attribute_indices"], "location %d" % i)
    for i, s in enumerate(d["stack_table"]):
        for l in s["location_indices"]:
            idx(l, "location_table", "stack %d" % i)
    for i, a in enumerate(d["attribute_table"]):
        sidx(a["key_strindex"], "attribute %d" % i)
        sidx(a["unit_strindex"], "attribute %d" % i)
    if not req["resource_profiles"]:
        bad("no resource_profiles")
    for rp in req["resource_profiles"]:
        keys = [kv["key"] for kv in (rp["resource"] or {"attributes": []})["attributes"]]
        if len(keys) != len(set(keys)):
            bad("resource attributes repeat a key")
        for sp in rp["scope_profiles"]:
            for pi, p in enumerate(sp["profiles"]):
                if p["sample_type"] is None:
                    bad("profile %d has no sample_type" % pi)
                sidx(p["sample_type"]["type_strindex"], "sample_type")
                sidx(p["sample_type"]["unit_strindex"], "sample_type")
                attrs(p["attribute_indices"], "profile %d" % pi)
                for si, s in enumerate(p["samples"]):
                    idx(s["stack_index"], "stack_table", "profile %d sample %d" % (pi, si))
                    idx(s["link_index"], "link_table", "profile %d sample %d" % (pi, si))
                    attrs(s["attribute_indices"], "profile %d sample %d" % (pi, si))
                    if len(s["values"]) not in (0, 1):
                        bad("profile %d sample %d: %d values for one sample type" % (pi, si, len(s["values"])))
                    if not s["values"] and not s["timestamps_unix_nano"]:
                        bad("profile %d sample %d: neither values nor timestamps" % (pi, si))
                    if s["values"] and s["timestamps_unix_nano"] and len(s["timestamps_unix_nano"]) != s["values"][0]:
                        pass


def summary(req):
    d = req["dictionary"]
    st = d["string_table"]

    def attr(a):
        kv = d["attribute_table"][a]
        return st[kv["key_strindex"]], any_value(kv["value"])

    def frame(li):
        l = d["location_table"][li]
        if l["lines"]:
            return st[d["function_table"][l["lines"][0]["function_index"]]["name_strindex"]]
        m = d["mapping_table"][l["mapping_index"]]
        bid = dict(attr(a) for a in m["attribute_indices"]).get("process.executable.build_id.gnu", "")
        return "%#x %s %s" % (l["address"], st[m["filename_strindex"]], bid)

    out = {"resource_profiles": []}
    for rp in req["resource_profiles"]:
        r = {"resource": {kv["key"]: any_value(kv["value"]) for kv in rp["resource"]["attributes"]},
             "profiles": []}
        for sp in rp["scope_profiles"]:
            for p in sp["profiles"]:
                samples = []
                for s in p["samples"]:
                    samples.append({
                        "value": sum(s["values"]) if s["values"] else len(s["timestamps_unix_nano"]),
                        "frames": [frame(li) for li in d["stack_table"][s["stack_index"]]["location_indices"]],
                        "attributes": dict(attr(a) for a in s["attribute_indices"]),
                    })
                r["profiles"].append({
                    "scope": sp["scope"]["name"] if sp["scope"] else "",
                    "sample_type": "%s/%s" % (st[p["sample_type"]["type_strindex"]], st[p["sample_type"]["unit_strindex"]]),
                    "attributes": dict(attr(a) for a in p["attribute_indices"]),
                    "time_unix_nano": p["time_unix_nano"],
                    "duration_nano": p["duration_nano"],
                    "total": sum(x["value"] for x in samples),
                    "samples": samples,
                })
        out["resource_profiles"].append(r)
    out["mappings"] = [{"file": st[m["filename_strindex"]],
                        "attributes": dict(attr(a) for a in m["attribute_indices"])}
                       for m in d["mapping_table"][1:]]
    return out


def handle(h, n, store):
    if h.path != "/v1development/profiles":
        raise common.Refused("404 page not found", 404)
    ct = h.headers.get("Content-Type", "").split(";")[0].strip()
    if ct != "application/x-protobuf":
        raise common.Refused("unsupported media type %r" % ct, 415)
    body = h.raw
    if h.headers.get("Content-Encoding", "") == "gzip":
        try:
            body = gzip.decompress(body)
        except OSError as e:
            bad("gzip: %s" % e)
    try:
        req = common.decode(SCHEMA, "ExportProfilesServiceRequest", body)
    except common.DecodeError as e:
        bad("proto: %s" % e)
    check(req)
    k = store.next_accepted()
    store.write("%d.json" % k, json.dumps(summary(req), indent=1))
    return 200, [("Content-Type", "application/x-protobuf")], b""


def status_proto(code, message):
    m = message.encode()
    # google.rpc.Status {int32 code = 1; string message = 2;}
    out = bytes([0x08]) + varint(code) + bytes([0x12]) + varint(len(m)) + m
    return out


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def refuse(h, message, status, exc=None):
    if status == 404:
        return 404, [("Content-Type", "text/plain")], b"404 page not found\n"
    return status, [("Content-Type", "application/x-protobuf")], status_proto(3, message)


if __name__ == "__main__":
    common.serve("OTLP/HTTP profiles (v1.11.0) conformance server", handle, refuse)
