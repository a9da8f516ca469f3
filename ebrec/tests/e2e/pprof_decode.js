// Decodes a gzip-compressed pprof profile (profile.proto) with the `pprof-format` npm
// package, a reader independent of ebtrace's, and prints a JSON summary for the Rust tests:
//   node pprof_decode.js PROFILE.pb.gz MODULES_DIR
// MODULES_DIR is where `npm install pprof-format` put node_modules.
'use strict';
const fs = require('fs');
const zlib = require('zlib');
const [, , file, modules] = process.argv;
const { Profile } = require(require.resolve('pprof-format', { paths: [modules] }));

const raw = fs.readFileSync(file);
if (raw[0] !== 0x1f || raw[1] !== 0x8b) {
  throw new Error('not gzip-compressed');
}
const p = Profile.decode(zlib.gunzipSync(raw));
const strings = p.stringTable.strings;
const str = (i) => strings[Number(i)];
const sampleTypes = p.sampleType.map((t) => [str(t.type), str(t.unit)]);
const totals = {};
for (const [t] of sampleTypes) totals[t] = 0;
for (const s of p.sample) {
  s.value.forEach((v, i) => {
    totals[sampleTypes[i][0]] += Number(v);
  });
  for (const id of s.locationId) {
    if (!p.location.some((l) => Number(l.id) === Number(id))) {
      throw new Error(`sample refers to missing location ${id}`);
    }
  }
}
const mappings = new Map(p.mapping.map((m) => [Number(m.id), m]));
const functions = new Map(p.function.map((f) => [Number(f.id), f]));
const locations = p.location.map((l) => {
  const m = mappings.get(Number(l.mappingId));
  return {
    id: Number(l.id),
    address: l.address.toString(16),
    mapping: m
      ? { filename: str(m.filename), build_id: str(m.buildId), has_inline_frames: m.hasInlineFrames }
      : null,
    lines: l.line.map((ln) => {
      const f = functions.get(Number(ln.functionId));
      return { function: str(f.name), file: str(f.filename), line: Number(ln.line) };
    }),
  };
});
// One Location per (mapping, address).
const keys = new Set(locations.map((l) => `${l.mapping && l.mapping.filename}@${l.address}`));
console.log(
  JSON.stringify({
    string0: strings[0],
    sample_types: sampleTypes,
    default_sample_type: str(p.defaultSampleType),
    totals,
    samples: p.sample.length,
    functions: p.function.length,
    distinct_functions: new Set(p.function.map((f) => `${str(f.name)}@${str(f.filename)}`)).size,
    distinct_location_keys: keys.size,
    locations,
    mappings: p.mapping.map((m) => ({ id: Number(m.id), filename: str(m.filename), build_id: str(m.buildId) })),
  }),
);
