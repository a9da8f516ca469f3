// The viewer of `ebsym report`: plain JavaScript, no library, no build step, no request to
// any host. It reads the one JSON blob of the page (analyze/src/reports/html/mod.rs says
// its shape) and draws the summary, the flame graphs (DOM), the timeline and heat maps
// (canvas) and the tables; a time range selected on the timeline filters the flame graphs
// and the range tables, recomputed here from the per (stack, time bucket) sums.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('ebtrace-data').textContent);
  var $ = function (id) { return document.getElementById(id); };
  var KIND_ORDER = ['cpu', 'offcpu', 'lock', 'alloc', 'memgrowth', 'func', 'syscall', 'bio', 'runq', 'tcp'];
  var COLORS = { cpu: '#3c9a4a', offcpu: '#5b7fb8', lock: '#c0392b', alloc: '#d68a1a', memgrowth: '#8e5bb8',
    func: '#1a9c9c', syscall: '#b8860b', bio: '#7a4f2a', runq: '#e0559b', tcp: '#555' };
  var state = { range: null, kind: null, measure: {}, zoom: null, search: '', diff: false };

  // ---------- formatting ----------
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === 'class') e.className = attrs[k];
      else if (k.indexOf('data-') === 0) e.setAttribute(k, attrs[k]);
      else e[k] = attrs[k];
    }
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function thousands(n) { return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ','); }
  function fmtNs(ns) {
    if (ns < 1e3) return Math.round(ns) + ' ns';
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + ' µs';
    if (ns < 1e9) return (ns / 1e6).toFixed(2) + ' ms';
    return (ns / 1e9).toFixed(2) + ' s';
  }
  function fmtBytes(b) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : Math.round(b)) + ' ' + u[i];
  }
  function fmtVal(v, unit) {
    if (unit === 'ns') return fmtNs(v);
    if (unit === 'bytes') return fmtBytes(v);
    return thousands(v) + ' ' + unit;
  }
  function fmtSec(ns) { return (ns / 1e9).toFixed(ns < 1e8 ? 4 : 3) + ' s'; }
  function frame(i) { var f = D.frames[i]; return { fn: f[0], file: f[1], line: f[2], module: f[3], inlined: !!f[4] }; }
  function isKernel(f) { return f.module.indexOf('[kernel') === 0; }
  // The C and C++ runtime, as analyze's summary tells it (reports/summary.rs, runtime()).
  var RUNTIME = ['libc.so', 'libc-', 'ld-linux', 'ld64.so', 'libstdc++', 'libm.so', 'libpthread', 'libgcc_s', 'libdl', 'librt', '[vdso]', '[uprobes]'];
  function runtime(f) {
    var file = f.module.split('/').pop();
    if (f.file && f.file.indexOf('/usr/include/') === 0) return true; // std::mutex's inlined helpers
    return RUNTIME.some(function (r) { return file.indexOf(r) === 0; });
  }
  // A stack's place for a table: the first frame of the program (not kernel, not the C and
  // C++ runtime), with the leaf when it is elsewhere.
  function place(stackId) {
    var s = D.stacks[stackId] || [];
    if (!s.length) return '[no stack]';
    var leaf = frame(s[0]).fn, own = null;
    for (var i = 0; i < s.length; i++) {
      var f = frame(s[i]);
      if (!isKernel(f) && !runtime(f)) { own = f.fn; break; }
    }
    if (!own || own === leaf) return leaf;
    return own + ' → ' + leaf;
  }
  function kindsPresent() {
    return KIND_ORDER.filter(function (k) { return D.kinds && D.kinds[k]; });
  }
  function inRangeBucket(b, bw) {
    if (!state.range) return true;
    var a = b * bw, z = a + bw;
    return z > state.range[0] && a < state.range[1];
  }

  // ---------- stack panel ----------
  function showStacks(title, parts) {
    $('stack-title').textContent = title;
    var body = $('stack-body');
    body.textContent = '';
    parts.forEach(function (p) {
      body.appendChild(el('h3', null, p.title));
      if (p.names) {
        // a stack given as function names, leaf first (the Threads section's)
        if (!p.names.length) { body.appendChild(el('div', { class: 'notes' }, '(no stack)')); return; }
        var ol0 = el('ol', { class: 'frames' });
        p.names.forEach(function (n) {
          var li = el('li', { 'data-fn': n });
          li.appendChild(el('span', { class: 'f' }, n));
          ol0.appendChild(li);
        });
        body.appendChild(ol0);
        return;
      }
      var s = D.stacks[p.stack] || [];
      if (!s.length) { body.appendChild(el('div', { class: 'notes' }, '(no stack)')); return; }
      var ol = el('ol', { class: 'frames' });
      s.forEach(function (fi, i) {
        var f = frame(fi);
        var li = el('li', { 'data-fn': f.fn });
        if (p.select !== undefined && s.length - 1 - i === p.select) li.className = 'sel';
        li.appendChild(el('span', { class: 'f' }, f.fn + (f.inlined ? ' [inlined]' : '')));
        if (f.file) li.appendChild(el('span', { class: 'loc' }, f.file + ':' + f.line));
        if (f.module) li.appendChild(el('span', { class: 'mod' }, f.module));
        ol.appendChild(li);
      });
      body.appendChild(ol);
    });
    $('stack-panel').hidden = false;
    document.body.classList.add('panel-open');
  }
  $('stack-close').onclick = function () { $('stack-panel').hidden = true; document.body.classList.remove('panel-open'); renderFlame(); drawTimeline(); };

  // ---------- summary ----------
  function renderSummary() {
    var b = $('summary-body'), info = D.info || {}, h = info.header || {};
    var title = 'ebtrace report: ' + D.name + (D.base ? ' (base: ' + D.base + ')' : '');
    $('title').textContent = title;
    var cols = el('div', { class: 'cols' });
    var left = el('div'), dl = el('dl', { class: 'kv' });
    function kv(k, v) { dl.appendChild(el('dt', null, k)); dl.appendChild(el('dd', { 'data-key': k }, v)); }
    kv('trace', D.name);
    kv('host', (h.hostname || '?') + ' (' + (h.arch || '') + ', ' + (h.cpu_count || '?') + ' CPUs)');
    kv('kernel', h.kernel_release || '?');
    kv('command', (h.argv || []).join(' '));
    if (h.start_time) kv('started', h.start_time);
    kv('duration', info.span ? fmtNs(info.span.duration_ns) : '(no events)');
    kv('ended', info.stop_reason ? 'clean (' + info.stop_reason + ')' : 'CUT: no trailer');
    kv('symbolized', info.symbolized ? 'yes (' + thousands(info.symbolized_addresses) + ' addresses)' : 'no');
    kv('stack mode', (D.stack_mode || (h.options && h.options['stack-mode']) || '?'));
    kv('stack memory', D.stack_memory || '?');
    var f = D.filter || {}, fs = [];
    if (f.pids && f.pids.length) fs.push('--pid ' + f.pids.join(','));
    if (f.tids && f.tids.length) fs.push('--tid ' + f.tids.join(','));
    if (f.comms && f.comms.length) fs.push('--comm ' + f.comms.join(','));
    if (f.from !== null && f.from !== undefined) fs.push('--from ' + f.from);
    if (f.to !== null && f.to !== undefined) fs.push('--to ' + f.to);
    kv('filters', fs.length ? fs.join(' ') : 'none');
    if (h.options) kv('options', Object.keys(h.options).map(function (k) { return k + '=' + h.options[k]; }).join(' '));
    (info.damage || []).forEach(function (d) { kv('DAMAGE', d); });
    left.appendChild(dl);
    cols.appendChild(left);

    var mid = el('div');
    mid.appendChild(el('h3', null, 'Events per family'));
    var ev = info.events || {}, rows = [];
    ['alloc', 'free', 'lock', 'func', 'cpu', 'offcpu', 'memgrowth', 'syscall', 'bio', 'runq', 'tcp', 'histogram_rows'].forEach(function (k) {
      if (ev[k]) rows.push({ family: k, events: ev[k] });
    });
    rows.push({ family: 'stacks', events: info.stacks || 0 });
    mid.appendChild(table('events', [{ k: 'family' }, { k: 'events', num: true, f: thousands }], rows, null));
    mid.appendChild(el('h3', null, 'Losses'));
    var losses = (info.losses || []).map(function (l) { return { family: l.family, reason: l.reason, count: l.count }; });
    var rec = (D.losses && D.losses.recorded) || {};
    Object.keys(rec).forEach(function (k) {
      if (k.indexOf('bpf program') === 0) losses.push({ family: k.split('/')[0], reason: k.split('/')[1] || '', count: rec[k] });
    });
    if (losses.length) mid.appendChild(table('losses', [{ k: 'family' }, { k: 'reason' }, { k: 'count', num: true, f: thousands }], losses, null));
    else mid.appendChild(el('div', { 'data-key': 'losses' }, 'none'));
    cols.appendChild(mid);

    var right = el('div');
    right.appendChild(el('h3', null, 'Unresolved frames by reason'));
    var un = (D.losses && D.losses.unresolved_frames) || {};
    var ur = Object.keys(un).map(function (k) { return { reason: k, frames: un[k] }; });
    if (ur.length) right.appendChild(table('unresolved', [{ k: 'reason' }, { k: 'frames', num: true, f: thousands }], ur, null));
    else right.appendChild(el('div', { 'data-key': 'unresolved' }, 'none'));
    var cut = (D.losses && D.losses.stacks_cut) || {};
    var cr = Object.keys(cut).map(function (k) { return { reason: k, stacks: cut[k] }; });
    if (cr.length) {
      right.appendChild(el('h3', null, 'Stacks cut short'));
      right.appendChild(table('stacks-cut', [{ k: 'reason' }, { k: 'stacks', num: true, f: thousands }], cr, null));
    }
    if (D.losses && D.losses.sampled) right.appendChild(el('div', { class: 'notes' }, 'allocations sampled by bytes (period ' +
      D.losses.sampled.min_period + '–' + D.losses.sampled.max_period + ' B): counts and bytes are estimates'));
    if (D.losses && D.losses.aggregated && Object.keys(D.losses.aggregated).length) right.appendChild(el('div', { class: 'notes' },
      'counted in the kernel (--aggregate), no per-event timeline: ' + Object.keys(D.losses.aggregated).join(', ')));
    cols.appendChild(right);
    b.appendChild(cols);

    b.appendChild(el('h3', null, 'Top findings'));
    var ul = el('ul', { class: 'findings', id: 'findings' });
    (D.summary || []).forEach(function (x) { ul.appendChild(el('li', { 'data-family': x.family }, x.finding)); });
    if (!(D.summary || []).length) ul.appendChild(el('li', null, 'no findings (no events?)'));
    b.appendChild(ul);
  }

  // ---------- threads ----------
  // Each thread group of `ebsym threads` (mod.rs: thread_groups): a bar of its wall time
  // split into on CPU, run queue, off CPU by cause and not seen, and a table of the parts;
  // a part clicked shows its top stacks in the stack panel.
  var CAUSE_COLORS = { lock: '#c0392b', disk: '#7a4f2a', 'idle wait': '#b9c2cc', 'network or pipe': '#1a9c9c',
    sleep: '#8fa9d6', 'wait for child or signal': '#8e5bb8', 'page fault': '#d68a1a', other: '#5b7fb8' };
  function threadParts(g) {
    var parts = [{ part: 'on CPU', ns: g.on_cpu_ns, count: g.cpu_samples, unit: 'samples', color: COLORS.cpu,
      stacks: g.top_cpu_stack.length ? [{ title: 'hottest on-CPU stack', names: g.top_cpu_stack }] : [] }];
    parts.push({ part: 'run queue', ns: g.runq_ns, count: null, unit: '', color: COLORS.runq, stacks: [] });
    g.offcpu.forEach(function (c) {
      parts.push({ part: 'off: ' + c.cause, ns: c.ns, count: c.blocks, unit: 'blocks', color: CAUSE_COLORS[c.cause] || '#777',
        stacks: c.top_stacks.map(function (t) { return { title: fmtNs(t.ns) + ' in ' + thousands(t.blocks) + ' blocks', names: t.frames }; }) });
    });
    parts.push({ part: 'not seen', ns: g.not_seen_ns, count: null, unit: '', color: '#eeeeee', stacks: [] });
    parts.forEach(function (p) {
      p.share = g.wall_ns ? p.ns / g.wall_ns : 0;
      p.top = p.stacks.length ? (p.stacks[0].names.filter(function (n) { return n; })[0] || '') : '';
    });
    return parts;
  }
  function showPart(g, p) {
    var title = g.thread + ' [' + g.pid + ']: ' + p.part + ', ' + fmtNs(p.ns) + ' (' + (p.share * 100).toFixed(1) + '%)';
    showStacks(title, p.stacks.length ? p.stacks : [{ title: 'no stacks for this part', names: [] }]);
  }
  function renderThreads() {
    var b = $('threads-body'), T = D.thread_groups || { groups: [] };
    b.textContent = '';
    if (!T.groups.length) {
      b.appendChild(el('div', { class: 'notes', 'data-key': 'threads-none' },
        'no cpu, offcpu or runq events in this trace: record with --cpu --offcpu --runq'));
      return;
    }
    b.appendChild(el('div', { class: 'notes' }, 'families: ' + (T.families.join(', ') || 'none') +
      (T.cpu_period_ns ? '; on CPU = samples × ' + fmtNs(T.cpu_period_ns) : '') +
      (T.total > T.groups.length ? '; the ' + T.groups.length + ' groups with the most wall time of ' + T.total : '')));
    T.groups.forEach(function (g, i) {
      var d = el('div', { class: 'tgroup', 'data-thread': g.thread, 'data-process': g.process, 'data-pid': g.pid, 'data-threads': g.threads });
      d.appendChild(el('h3', null, g.process + ' [' + g.pid + '] ' + g.thread + ' (' + g.threads + ' thread' +
        (g.threads === 1 ? '' : 's') + '): wall ' + fmtNs(g.wall_ns)));
      if (g.names.length > 1 || g.names[0] !== g.thread) d.appendChild(el('div', { class: 'notes' }, 'threads: ' + g.names.join(', ')));
      var parts = threadParts(g), bar = el('div', { class: 'tbar' });
      parts.forEach(function (p) {
        if (!p.ns) return;
        var s = el('span', { 'data-part': p.part, 'data-ns': p.ns });
        s.style.width = (p.share * 100).toFixed(3) + '%';
        s.style.background = p.color;
        s.title = p.part + ': ' + fmtNs(p.ns) + ' (' + (p.share * 100).toFixed(1) + '%)' + (p.top ? '\ntop: ' + p.top : '');
        s.onclick = function () { showPart(g, p); };
        bar.appendChild(s);
      });
      d.appendChild(bar);
      d.appendChild(table('threads-' + i, [
        { k: 'part' },
        { k: 'ns', label: 'time', num: true, f: fmtNs },
        { k: 'share', num: true, f: function (v) { return (v * 100).toFixed(1) + '%'; } },
        { k: 'count', label: 'samples / blocks', num: true, f: function (v) { return v === null ? '' : thousands(v); } },
        { k: 'top', label: 'top stack (leaf)', fn: true }
      ], parts, function (p) { showPart(g, p); }));
      b.appendChild(d);
    });
  }

  // ---------- requests ----------
  // `ebsym requests` (mod.rs: requests_json): the latency, the kernel's split of every
  // request, what the tail spends more on than the median (per cause, with its stacks and
  // wakers), and the slowest requests one by one.
  function reqColor(cause) {
    if (cause === 'on CPU') return COLORS.cpu;
    if (cause === 'run queue') return COLORS.runq;
    if (cause === 'not seen') return '#eeeeee';
    return CAUSE_COLORS[cause.replace('off CPU: ', '')] || '#5b7fb8';
  }
  // A cause's stacks and wakers as stack-panel parts.
  function causeParts(c, sign) {
    var parts = (c.stacks || []).map(function (s) {
      return { title: sign + fmtNs(s.ns !== undefined ? s.ns : s.delta_ns) + ' in ' + s.place, names: s.frames };
    });
    (c.woken_by || []).forEach(function (w) {
      var req = w.request ? ', inside its request' + (w.request.id !== null && w.request.id !== undefined ? ' id ' + w.request.id : '') +
        ' (' + fmtNs(w.request.duration_ns) + ')' : '';
      parts.push({ title: sign + fmtNs(w.ns !== undefined ? w.ns : w.delta_ns) + ' woken by ' + w.thread +
        (w.place ? ' in ' + w.place : '') + req, names: w.frames });
    });
    return parts.length ? parts : [{ title: 'no stacks for this cause', names: [] }];
  }
  function renderRequests() {
    var R = D.requests;
    if (!R) return;
    $('requests').hidden = false;
    $('requests-link').hidden = false;
    var b = $('requests-body');
    b.textContent = '';
    if (R.error) { b.appendChild(el('div', { class: 'notes', 'data-key': 'requests-error' }, R.error)); return; }
    b.appendChild(el('div', { class: 'notes', 'data-key': 'requests-latency' }, thousands(R.count) + ' requests (' + R.request +
      '): p50 ' + fmtNs(R.p50_ns) + ' · p90 ' + fmtNs(R.p90_ns) + ' · p99 ' + fmtNs(R.p99_ns) + ' · p99.9 ' +
      fmtNs(R.p999_ns) + ' · max ' + fmtNs(R.max_ns)));
    if (R.nested + R.unmatched_done + R.open_at_end > 0) {
      b.appendChild(el('div', { class: 'notes' }, 'unpaired: ' + R.nested + ' nested, ' + R.unmatched_done +
        ' done without a start, ' + R.open_at_end + ' open at the end'));
    }
    var K = R.kernel_split;
    if (K) {
      var parts = [['on CPU', K.on_cpu_ns], ['run queue', K.runq_ns], ['off CPU: interruptible', K.sleep_ns],
        ['off CPU: uninterruptible', K.disk_ns]];
      b.appendChild(el('h3', null, 'Split in the kernel: ' + thousands(K.requests) + ' of ' + thousands(R.count) + ' requests, ' +
        fmtNs(K.total_ns) + ' in all'));
      var bar = el('div', { class: 'tbar', 'data-key': 'requests-split' });
      parts.forEach(function (p) {
        if (!p[1]) return;
        var share = K.total_ns ? p[1] / K.total_ns : 0;
        var s = el('span', { 'data-part': p[0], 'data-ns': p[1] });
        s.style.width = (share * 100).toFixed(3) + '%';
        s.style.background = p[0] === 'off CPU: interruptible' ? CAUSE_COLORS.lock : p[0] === 'off CPU: uninterruptible' ? CAUSE_COLORS.disk : reqColor(p[0]);
        s.title = p[0] + ': ' + fmtNs(p[1]) + ' (' + (share * 100).toFixed(1) + '%)';
        bar.appendChild(s);
      });
      b.appendChild(bar);
      b.appendChild(el('div', { class: 'notes', 'data-key': 'requests-split-text' }, parts.map(function (p) {
        return p[0] + ' ' + (K.total_ns ? 100 * p[1] / K.total_ns : 0).toFixed(1) + '%';
      }).join(' · ') + ' · ' + (K.blocks / K.requests).toFixed(1) + ' blocks a request'));
    }
    var T = R.tail;
    if (T) {
      b.appendChild(el('h3', null, 'The tail (≥ p' + T.percentile + ' = ' + fmtNs(T.threshold_ns) + ', ' + thousands(T.tail_requests) +
        ' requests, mean ' + fmtNs(T.tail_mean_ns) + ') against the median (' + thousands(T.median_requests) + ' requests, mean ' +
        fmtNs(T.median_mean_ns) + '), per request'));
      var rows = T.causes.map(function (c) {
        var top = (c.stacks[0] && c.stacks[0].place) || '';
        var w = c.woken_by && c.woken_by[0];
        return { cause: c.cause, delta_ns: c.delta_ns, tail_ns: c.tail_ns, median_ns: c.median_ns,
          top: top, waker: w ? w.thread + (w.place ? ' in ' + w.place : '') : '', c: c };
      });
      b.appendChild(table('requests-tail', [
        { k: 'cause' },
        { k: 'delta_ns', label: 'more in the tail', num: true, f: function (v) { return (v >= 0 ? '+' : '−') + fmtNs(Math.abs(v)); } },
        nsCol('tail_ns', 'tail'), nsCol('median_ns', 'median'),
        { k: 'top', label: 'top place', fn: true }, { k: 'waker', label: 'top waker' }
      ], rows, function (r) { showStacks('the tail: ' + r.cause, causeParts(r.c, '+')); }));
    }
    if (R.slowest.length) {
      b.appendChild(el('h3', null, 'The ' + R.slowest.length + ' slowest requests'));
      var srows = R.slowest.map(function (r, i) {
        var c = r.causes[0];
        return { rank: i + 1, duration_ns: r.duration_ns, id: r.id === null || r.id === undefined ? '' : r.id,
          thread: r.thread + ' [' + r.tid + ']', at_s: r.at_s,
          cause: c ? c.cause + ' ' + fmtNs(c.ns) : 'not seen', r: r };
      });
      b.appendChild(table('requests-slowest', [
        numCol('rank', '#'), nsCol('duration_ns', 'duration'), { k: 'id' }, { k: 'thread' },
        { k: 'at_s', label: 'at', num: true, f: function (v) { return v.toFixed(3) + ' s'; } },
        { k: 'cause', label: 'largest cause' }
      ], srows, function (row) {
        var r = row.r, parts = [];
        r.causes.forEach(function (c) {
          causeParts(c, '').forEach(function (p, i) {
            parts.push({ title: (i ? '' : fmtNs(c.ns) + ' ' + c.cause + ': ') + p.title, names: p.names });
          });
        });
        showStacks('request' + (r.id !== null && r.id !== undefined ? ' ' + r.id : '') + ', ' + fmtNs(r.duration_ns) +
          ' (not seen ' + fmtNs(r.not_seen_ns) + ')', parts);
      }));
    }
    if (R.note) b.appendChild(el('div', { class: 'notes', 'data-key': 'requests-note' }, R.note));
  }

  // ---------- sortable tables ----------
  // cols: [{k, label, num, f(value,row)}]; onRow(row) on click.
  function table(id, cols, rows, onRow) {
    var t = el('table', { 'data-table': id });
    var thead = el('thead'), tr = el('tr');
    var tbody = el('tbody');
    var sort = { col: -1, dir: 1 };
    function fill() {
      tbody.textContent = '';
      rows.forEach(function (r) {
        var row = el('tr');
        cols.forEach(function (c) {
          var v = r[c.k];
          var td = el('td', { class: c.num ? 'num' : (c.fn ? 'fn' : '') }, c.f ? c.f(v, r) : (v === null || v === undefined ? '' : v));
          if (c.fn) td.title = td.textContent;
          row.appendChild(td);
        });
        if (onRow) row.onclick = function () { onRow(r); };
        tbody.appendChild(row);
      });
    }
    cols.forEach(function (c, i) {
      var th = el('th', { 'data-col': c.k }, c.label || c.k);
      th.onclick = function () {
        sort.dir = sort.col === i ? -sort.dir : (c.num ? -1 : 1);
        sort.col = i;
        rows.sort(function (a, b) {
          var x = a[c.k], y = b[c.k];
          if (x === null || x === undefined) x = c.num ? -Infinity : '';
          if (y === null || y === undefined) y = c.num ? -Infinity : '';
          return (x < y ? -1 : x > y ? 1 : 0) * sort.dir;
        });
        thead.querySelectorAll('th').forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
        th.classList.add(sort.dir > 0 ? 'sorted-asc' : 'sorted-desc');
        fill();
      };
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    t.appendChild(thead);
    t.appendChild(tbody);
    fill();
    return t;
  }

  // ---------- flame graphs ----------
  function measureOf(kind) {
    var K = D.kinds[kind], m = state.measure[kind];
    return K.measures.filter(function (x) { return x.name === m; })[0] || K.measures[0];
  }
  // Per stack sums in the range: {stack: value}.
  function stackValues(kind, col) {
    var K = D.kinds[kind], a = K.agg, bw = K.bucket_ns, out = new Map();
    for (var i = 0; i < a.length; i += 5) {
      if (!inRangeBucket(a[i + 1], bw)) continue;
      var v = a[i + 2 + col];
      if (!v) continue;
      out.set(a[i], (out.get(a[i]) || 0) + v);
    }
    return out;
  }
  function newNode(name, depth, parent) {
    return { name: name, value: 0, before: 0, children: new Map(), depth: depth, parent: parent, best: -1, bestV: -1, kernel: false };
  }
  function insert(root, stack, v, before) {
    var s = D.stacks[stack] || [], node = root;
    root.value += v; root.before += before || 0;
    var w = Math.max(v, before || 0);
    if (w > root.bestV) { root.bestV = w; root.best = stack; }
    var names = s.length ? s : [-1];
    for (var i = names.length - 1; i >= 0; i--) {
      var f = names[i] >= 0 ? frame(names[i]) : { fn: '[no stack]', module: '' };
      var c = node.children.get(f.fn);
      if (!c) { c = newNode(f.fn, node.depth + 1, node); c.kernel = isKernel(f); node.children.set(f.fn, c); }
      c.value += v; c.before += before || 0;
      if (w > c.bestV) { c.bestV = w; c.best = stack; }
      node = c;
    }
  }
  function buildTree(kind) {
    var root = newNode('all', 0, null);
    if (state.diff && D.diff && D.diff[kind]) {
      D.diff[kind].rows.forEach(function (r) { insert(root, r[0], r[2], r[1]); });
      root.diff = true;
      return root;
    }
    var col = measureOf(kind).col;
    stackValues(kind, col).forEach(function (v, s) { insert(root, s, v, 0); });
    return root;
  }
  function hash(s) { var h = 0; for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return Math.abs(h); }
  function nodeColor(n, root) {
    if (root.diff) {
      var b = n.before, a = n.value, m = Math.max(a, b) || 1, d = (a - b) / m;
      if (Math.abs(d) < 0.02) return '#ddd';
      var k = Math.round(235 - Math.min(1, Math.abs(d)) * 150);
      return d > 0 ? 'rgb(255,' + k + ',' + k + ')' : 'rgb(' + k + ',' + k + ',255)';
    }
    var x = hash(n.name);
    if (n.kernel) return 'hsl(' + (20 + x % 20) + ',80%,' + (62 + x % 10) + '%)';
    return 'hsl(' + (x % 50 + 10) + ',' + (70 + x % 20) + '%,' + (60 + x % 12) + '%)';
  }
  var flameRoot = null;
  function renderFlame() {
    var kind = state.kind, box = $('flame-graph');
    box.textContent = '';
    if (!kind) { box.appendChild(el('div', { class: 'notes' }, 'no stacks in this trace')); return; }
    var K = D.kinds[kind];
    var root = buildTree(kind);
    flameRoot = root;
    var unit = root.diff ? D.diff[kind].unit : measureOf(kind).unit;
    var info = $('flame-info');
    info.textContent = '';
    var total = root.value;
    info.appendChild(el('div', { id: 'flame-total', 'data-total': total, 'data-kind': kind },
      kind + ': ' + fmtVal(total, unit) + (root.diff ? ' after, ' + fmtVal(root.before, unit) + ' before (' + (D.base || 'base') + ')' : '') +
      (state.range && !root.diff ? ' in ' + fmtSec(state.range[0]) + ' – ' + fmtSec(state.range[1]) : ' (whole trace)')));
    if (root.diff) info.appendChild(el('div', null, 'differential: widths are the trace\'s values, red grew, blue shrank against the base; the whole traces (a selected range applies to the trace alone). ' + (D.diff[kind].notes || []).join('; ')));
    if (K.stacks_total > K.stacks_shown && !root.diff) info.appendChild(el('div', { class: 'notes' }, kind + ': the ' + thousands(K.stacks_shown) + ' heaviest of ' + thousands(K.stacks_total) + ' stacks drawn; the others are summed under "[more stacks ...]" (ebsym top, folded and flamegraph have every stack)'));
    if (K.bucket_ns && !root.diff) info.appendChild(el('div', null, 'a selected range keeps the events that start in it, to ' + fmtNs(K.bucket_ns) + ' (the time buckets of the sums)'));
    // Zoom: the zoomed node, kept by its path of names.
    var z = root;
    if (state.zoom) {
      for (var i = 0; i < state.zoom.length; i++) {
        var c = z.children.get(state.zoom[i]);
        if (!c) break;
        z = c;
      }
    }
    var W = box.clientWidth || 1000, H = 17, drawn = 0, maxDepth = 0;
    var scale = z.value > 0 ? W / z.value : 0;
    var re = null;
    if (state.search) { try { re = new RegExp(state.search); } catch (e) { re = null; } }
    var frag = document.createDocumentFragment();
    function add(n, x, w) {
      var d = el('div', { class: 'fr', 'data-name': n.name, 'data-depth': n.depth });
      d.style.left = x + 'px'; d.style.width = Math.max(w, 1) + 'px'; d.style.top = (n.depth * H) + 'px';
      d.style.background = nodeColor(n, root);
      if (w > 30) d.textContent = n.name;
      if (re && re.test(n.name)) d.classList.add('match');
      d._node = n;
      frag.appendChild(d);
      drawn++;
      if (n.depth > maxDepth) maxDepth = n.depth;
    }
    // The zoomed node's ancestors, full width, dimmed.
    for (var p = z; p; p = p.parent) { add(p, 0, W); if (p !== z) frag.lastChild.classList.add('dim'); }
    function walk(n, x) {
      var cx = x;
      var kids = Array.from(n.children.values()).sort(function (a, b) { return a.name < b.name ? -1 : 1; });
      kids.forEach(function (c) {
        var w = c.value * scale;
        if (root.diff && z.value === 0) w = 0;
        if (w >= 0.5 && drawn < 8000) { add(c, cx, w); walk(c, cx); }
        cx += w;
      });
    }
    walk(z, 0);
    box.appendChild(frag);
    box.style.height = ((maxDepth + 1) * H + 4) + 'px';
    // Search: the share of the total in matching frames (a match under a match once).
    var m = $('flame-match');
    if (re) {
      var matched = 0;
      (function mwalk(n) {
        n.children.forEach(function (c) { if (re.test(c.name)) matched += c.value; else mwalk(c); });
      })(root);
      m.textContent = 'matched ' + (total ? (100 * matched / total).toFixed(1) : '0.0') + '% (' + fmtVal(matched, unit) + ')';
      m.setAttribute('data-matched', matched);
    } else { m.textContent = ''; m.removeAttribute('data-matched'); }
    box.setAttribute('data-frames', drawn);
  }
  function nodePath(n) { var p = []; for (; n && n.parent; n = n.parent) p.unshift(n.name); return p; }
  $('flame-graph').addEventListener('click', function (e) {
    var d = e.target.closest('.fr');
    if (!d || !d._node) return;
    var n = d._node, kind = state.kind;
    state.zoom = nodePath(n);
    renderFlame();
    if (n.best >= 0 && n.parent) {
      var parts = [{ title: 'heaviest stack through ' + n.name + ' (leaf first)', stack: n.best, select: n.depth - 1 }];
      var K = D.kinds[kind];
      if (K && K.wakers) {
        var w = K.wakers.filter(function (x) { return x[0] === n.best; })[0];
        if (w) parts.push({ title: (kind === 'lock' ? 'holder (the thread that released the lock)' : 'waker') + ', most often', stack: w[1] });
      }
      var unit = flameRoot.diff ? D.diff[kind].unit : measureOf(kind).unit;
      showStacks(n.name + ' — ' + fmtVal(n.value, unit), parts);
    }
  });
  var tip = $('flame-tip');
  $('flame-graph').addEventListener('mousemove', function (e) {
    var d = e.target.closest('.fr');
    if (!d || !d._node) { tip.hidden = true; return; }
    var n = d._node, kind = state.kind, unit = flameRoot.diff ? D.diff[kind].unit : measureOf(kind).unit;
    var t = n.name + '\n' + fmtVal(n.value, unit) + ' (' + (flameRoot.value ? (100 * n.value / flameRoot.value).toFixed(2) : 0) + '% of all)';
    if (flameRoot.diff) t += '\nbase ' + fmtVal(n.before, unit) + ', ' + (n.value >= n.before ? '+' : '−') + fmtVal(Math.abs(n.value - n.before), unit);
    tip.textContent = t;
    tip.style.left = Math.min(e.clientX + 12, window.innerWidth - 400) + 'px';
    tip.style.top = (e.clientY + 14) + 'px';
    tip.hidden = false;
  });
  $('flame-graph').addEventListener('mouseleave', function () { tip.hidden = true; });
  function setupFlameControls() {
    var tabs = $('flame-tabs');
    kindsPresent().forEach(function (k) {
      var b = el('button', { type: 'button', 'data-kind': k }, k);
      b.onclick = function () { selectKind(k); };
      tabs.appendChild(b);
    });
    var diffKinds = D.diff ? Object.keys(D.diff) : [];
    if (diffKinds.length) { $('flame-diff-label').hidden = false; }
    $('flame-diff').onchange = function () { state.diff = this.checked; state.zoom = null; renderFlame(); };
    $('flame-measure').onchange = function () { state.measure[state.kind] = this.value; renderFlame(); };
    $('flame-search').oninput = function () { state.search = this.value; renderFlame(); };
    $('flame-reset').onclick = function () { state.zoom = null; renderFlame(); };
    var first = kindsPresent()[0];
    if (first) selectKind(first);
    else renderFlame();
  }
  function selectKind(k) {
    state.kind = k; state.zoom = null;
    $('flame-tabs').querySelectorAll('button').forEach(function (b) { b.classList.toggle('active', b.getAttribute('data-kind') === k); });
    var sel = $('flame-measure'); sel.textContent = '';
    D.kinds[k].measures.forEach(function (m) { sel.appendChild(el('option', { value: m.name }, m.name)); });
    sel.value = measureOf(k).name;
    renderFlame();
  }

  // ---------- timeline ----------
  var TL = { rows: [], rowOf: new Map(), tidRow: new Map(), events: [], view: [0, Math.max(1, D.end_ns || 1)], lanes: [] };
  var ROW_H = 22, AXIS_H = 26, LABEL_W = 190;
  function setupTimeline() {
    var procs = new Map();
    (D.threads || []).forEach(function (t) {
      var pid = t[0], tid = t[1];
      if (!procs.has(pid)) procs.set(pid, { comm: t[2], threads: [], names: new Map() });
      procs.get(pid).threads.push(tid);
      if (t[4]) procs.get(pid).names.set(tid, t[4]);
    });
    procs.forEach(function (p, pid) {
      TL.rows.push({ proc: true, pid: pid, label: p.comm + ' [' + pid + ']' });
      p.threads.sort(function (a, b) { return a - b; }).forEach(function (tid) {
        TL.rowOf.set(pid + ':' + tid, TL.rows.length);
        if (!TL.tidRow.has(tid)) TL.tidRow.set(tid, TL.rows.length);
        var name = p.names.get(tid);
        TL.rows.push({ pid: pid, tid: tid, label: (name ? name + ' ' : (tid === pid ? 'main ' : '')) + 'tid ' + tid, counts: {} });
      });
    });
    TL.lanes = kindsPresent().filter(function (k) { return k !== 'cpu' && D.kinds[k].timeline.length; });
    TL.lanes.forEach(function (k) {
      var a = D.kinds[k].timeline;
      for (var i = 0; i < a.length; i += 8) {
        var r = TL.rowOf.get(a[i + 3] + ':' + a[i + 2]);
        if (r === undefined) continue;
        TL.events.push({ k: k, i: i, row: r, t: a[i], dur: a[i + 1] });
        TL.rows[r].counts[k] = (TL.rows[r].counts[k] || 0) + 1;
      }
    });
    var leg = $('timeline-legend');
    if (D.kinds && D.kinds.cpu) leg.appendChild(legendItem('cpu', 'CPU samples (density)'));
    TL.lanes.forEach(function (k) { leg.appendChild(legendItem(k, k + (k === 'offcpu' || k === 'lock' ? ' (arrow: from the waker / holder)' : ''))); });
    var notes = $('timeline-notes');
    kindsPresent().forEach(function (k) {
      var K = D.kinds[k];
      if (k === 'cpu') { notes.appendChild(el('div', null, 'cpu: ' + thousands(K.events) + ' samples, drawn as a density per thread and ' + fmtNs(D.kinds.cpu.bucket_ns) + ' bucket')); return; }
      var left = K.events - K.timeline_kept;
      notes.appendChild(el('div', { 'data-kind': k }, k + ': ' + thousands(K.timeline_kept) + ' events drawn' +
        (left > 0 ? ', the ' + K.timeline_rule + ' ' + thousands(D.caps.timeline) + '; ' + thousands(left) + ' more are in the flame graphs and tables, not drawn here' : ' (all)')));
    });
    var c = $('timeline-canvas');
    c.addEventListener('wheel', function (e) {
      e.preventDefault();
      var x = timeAt(e.offsetX), f = e.deltaY > 0 ? 1.25 : 0.8;
      var a = x - (x - TL.view[0]) * f, b = x + (TL.view[1] - x) * f;
      if (b - a < 1000) return;
      TL.view = [Math.max(-0.05 * D.end_ns, a), Math.min(D.end_ns * 1.05 + 1, b)];
      drawTimeline();
    }, { passive: false });
    var drag = null;
    c.addEventListener('mousedown', function (e) {
      drag = { x: e.offsetX, y: e.offsetY, view: TL.view.slice(), select: e.shiftKey || e.offsetY < AXIS_H, moved: false };
    });
    window.addEventListener('mousemove', function (e) {
      if (!drag) { hoverTimeline(e); return; }
      var r = c.getBoundingClientRect(), x = e.clientX - r.left;
      if (Math.abs(x - drag.x) > 3) drag.moved = true;
      if (drag.select) {
        TL.brush = [timeAt(Math.min(x, drag.x)), timeAt(Math.max(x, drag.x))];
      } else {
        var dt = (x - drag.x) / plotW() * (drag.view[1] - drag.view[0]);
        TL.view = [drag.view[0] - dt, drag.view[1] - dt];
      }
      drawTimeline();
    });
    window.addEventListener('mouseup', function (e) {
      if (!drag) return;
      var d = drag; drag = null;
      tip.hidden = true;
      if (d.select && d.moved && TL.brush) {
        setRange([Math.max(0, TL.brush[0]), Math.min(D.end_ns + 1, TL.brush[1])]);
        TL.brush = null;
      } else if (!d.moved && e.target === c) {
        var hit = hitTimeline(e.offsetX, e.offsetY);
        if (hit) clickEvent(hit);
      }
      drawTimeline();
    });
    window.addEventListener('resize', function () { drawTimeline(); renderFlame(); drawHeatmaps(); });
  }
  function legendItem(k, text) {
    var s = el('span'); var i = el('i'); i.style.background = COLORS[k]; s.appendChild(i); s.appendChild(document.createTextNode(text)); return s;
  }
  function plotW() { return Math.max(100, $('timeline-canvas').clientWidth - LABEL_W); }
  function xOf(t) { return LABEL_W + (t - TL.view[0]) / (TL.view[1] - TL.view[0]) * plotW(); }
  function timeAt(x) { return TL.view[0] + (x - LABEL_W) / plotW() * (TL.view[1] - TL.view[0]); }
  function laneBox(row, k) {
    var n = TL.lanes.length || 1, idx = TL.lanes.indexOf(k), top = AXIS_H + row * ROW_H + 5, h = (ROW_H - 7) / n;
    return [top + idx * h, Math.max(2, h - 1)];
  }
  var drawnInfo = null;
  function drawTimeline() {
    var c = $('timeline-canvas');
    var W = c.clientWidth || 1000, Hh = AXIS_H + TL.rows.length * ROW_H + 4;
    var dpr = window.devicePixelRatio || 1;
    c.width = W * dpr; c.height = Hh * dpr; c.style.height = Hh + 'px';
    var g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, Hh);
    g.font = '11px system-ui, sans-serif';
    // Rows and labels.
    TL.rows.forEach(function (r, i) {
      var y = AXIS_H + i * ROW_H;
      g.fillStyle = r.proc ? '#e9edf2' : (i % 2 ? '#fafbfc' : '#fff');
      g.fillRect(0, y, W, ROW_H);
      g.fillStyle = r.proc ? '#1d232b' : '#5b6573';
      g.fillText(r.label, r.proc ? 4 : 14, y + 15);
    });
    // Axis.
    var span = TL.view[1] - TL.view[0], step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    if (span / step > 16) step *= 5; else if (span / step > 8) step *= 2;
    g.fillStyle = '#5b6573'; g.strokeStyle = '#e3e7ec';
    for (var t = Math.ceil(TL.view[0] / step) * step; t <= TL.view[1]; t += step) {
      var x = xOf(t);
      g.beginPath(); g.moveTo(x, AXIS_H - 6); g.lineTo(x, Hh); g.stroke();
      g.fillText(fmtSec(t), x + 2, 12);
    }
    g.fillText('seconds into the trace', 4, 22);
    g.save();
    g.beginPath(); g.rect(LABEL_W, 0, W - LABEL_W, Hh); g.clip();
    // CPU density.
    var info = { rows: [], arrows: 0, bars: {}, cpu_cells: 0 };
    if (D.kinds && D.kinds.cpu && D.cpu) {
      var bw = D.kinds.cpu.bucket_ns, a = D.cpu, max = 1;
      for (var i = 2; i < a.length; i += 3) if (a[i] > max) max = a[i];
      for (i = 0; i < a.length; i += 3) {
        var row = TL.tidRow.get(a[i]);
        if (row === undefined) continue;
        var x0 = xOf(a[i + 1] * bw), x1 = xOf((a[i + 1] + 1) * bw);
        if (x1 < LABEL_W || x0 > W) continue;
        g.fillStyle = 'rgba(60,154,74,' + (0.25 + 0.75 * a[i + 2] / max) + ')';
        g.fillRect(x0, AXIS_H + row * ROW_H + 1, Math.max(1, x1 - x0), 3);
        info.cpu_cells++;
      }
    }
    // Bars and ticks.
    var arrows = [];
    TL.events.forEach(function (e) {
      var x0 = xOf(e.t), x1 = xOf(e.t + e.dur);
      if (x1 < LABEL_W - 2 || x0 > W) return;
      var lb = laneBox(e.row, e.k);
      g.fillStyle = COLORS[e.k];
      g.fillRect(x0, lb[0], Math.max(e.dur ? 1 : 1.5, x1 - x0), lb[1]);
      info.bars[e.k] = (info.bars[e.k] || 0) + 1;
      if (e.k === 'offcpu' || e.k === 'lock') {
        var A = D.kinds[e.k].timeline, wt = A[e.i + 5];
        if (wt) {
          var wr = TL.tidRow.get(wt);
          if (wr !== undefined && wr !== e.row) arrows.push({ x: x1, from: wr, to: e.row, k: e.k, tid: A[e.i + 2], wtid: wt });
        }
      }
    });
    if (arrows.length <= 5000) arrows.forEach(function (a) {
      var y0 = AXIS_H + a.from * ROW_H + ROW_H / 2, y1 = AXIS_H + a.to * ROW_H + ROW_H / 2;
      g.strokeStyle = a.k === 'lock' ? 'rgba(192,57,43,0.8)' : 'rgba(40,40,40,0.7)';
      g.fillStyle = g.strokeStyle;
      g.beginPath(); g.moveTo(a.x, y0); g.lineTo(a.x, y1); g.stroke();
      var dir = y1 > y0 ? 1 : -1;
      g.beginPath(); g.moveTo(a.x, y1); g.lineTo(a.x - 3, y1 - 5 * dir); g.lineTo(a.x + 3, y1 - 5 * dir); g.closePath(); g.fill();
    });
    info.arrows = arrows.length;
    // The selected range and the brush.
    [[state.range, 'rgba(47,111,178,0.12)'], [TL.brush, 'rgba(47,111,178,0.25)']].forEach(function (p) {
      if (!p[0]) return;
      var x0 = xOf(p[0][0]), x1 = xOf(p[0][1]);
      g.fillStyle = p[1]; g.fillRect(x0, 0, x1 - x0, Hh);
      g.strokeStyle = '#2f6fb2'; g.strokeRect(x0, 0, x1 - x0, Hh);
    });
    g.restore();
    // What was drawn, for tests and scripts.
    TL.rows.forEach(function (r) { if (!r.proc && info.rows.length < 500) info.rows.push({ pid: r.pid, tid: r.tid, counts: r.counts }); });
    info.arrow_samples = arrows.slice(0, 200).map(function (a) { return { kind: a.k, tid: a.tid, waker_tid: a.wtid }; });
    info.view = TL.view.slice();
    drawnInfo = info;
    c.setAttribute('data-arrows', info.arrows);
    c.setAttribute('data-rows', TL.rows.length);
  }
  function hitTimeline(x, y) {
    var row = Math.floor((y - AXIS_H) / ROW_H);
    if (row < 0 || row >= TL.rows.length || x < LABEL_W) return null;
    var t = timeAt(x), slack = 3 / plotW() * (TL.view[1] - TL.view[0]), best = null;
    TL.events.forEach(function (e) {
      if (e.row !== row) return;
      var lb = laneBox(row, e.k);
      if (y < lb[0] - 1 || y > lb[0] + lb[1] + 1) return;
      if (t >= e.t - slack && t <= e.t + e.dur + slack && (!best || e.dur < best.dur)) best = e;
    });
    return best;
  }
  function eventText(e) {
    var A = D.kinds[e.k].timeline, i = e.i, s = e.k + ' at ' + fmtSec(A[i]);
    if (A[i + 1]) s += ', ' + fmtNs(A[i + 1]);
    s += '\ntid ' + A[i + 2] + ' (pid ' + A[i + 3] + ')\n' + place(A[i + 4]);
    if (A[i + 5]) s += '\n' + (e.k === 'lock' ? 'released by' : 'woken by') + ' tid ' + A[i + 5];
    if (e.k === 'lock' && A[i + 7]) s += '\nheld ' + fmtNs(A[i + 7]) + ' after';
    if ((e.k === 'alloc' || e.k === 'memgrowth' || e.k === 'bio') && A[i + 7]) s += '\n' + fmtBytes(A[i + 7]);
    return s;
  }
  function hoverTimeline(e) {
    var c = $('timeline-canvas');
    if (e.target !== c) { if (tip._tl) { tip.hidden = true; tip._tl = false; } return; }
    var hit = hitTimeline(e.offsetX, e.offsetY);
    if (!hit) { tip.hidden = true; return; }
    tip.textContent = eventText(hit);
    tip.style.left = Math.min(e.clientX + 12, window.innerWidth - 400) + 'px';
    tip.style.top = (e.clientY + 14) + 'px';
    tip.hidden = false; tip._tl = true;
  }
  function clickEvent(e) {
    var A = D.kinds[e.k].timeline, i = e.i, parts = [{ title: e.k + ' of tid ' + A[i + 2] + ' (leaf first)', stack: A[i + 4] }];
    if (A[i + 6]) parts.push({ title: (e.k === 'lock' ? 'holder' : 'waker') + ': tid ' + A[i + 5], stack: A[i + 6] - 1 });
    showStacks(eventText(e).split('\n')[0], parts);
  }

  // ---------- range ----------
  function setRange(r) {
    if (r && r[1] - r[0] < 1) r = null;
    state.range = r;
    $('range-text').textContent = r ? 'range ' + fmtSec(r[0]) + ' – ' + fmtSec(r[1]) : 'whole trace';
    $('range-clear').hidden = !r;
    renderFlame();
    drawTimeline();
    drawHeatmaps();
    renderRangeTables();
  }
  $('range-clear').onclick = function () { setRange(null); };

  // ---------- heat maps ----------
  var HEAT_KINDS = ['syscall', 'bio', 'runq', 'func', 'offcpu', 'lock'];
  function setupHeatmaps() {
    var body = $('heatmap-body'), any = false;
    HEAT_KINDS.forEach(function (k) {
      var h = D.heatmaps && D.heatmaps[k];
      if (!h) return;
      any = true;
      var d = el('div', { class: 'heat', 'data-kind': k, 'data-total': h.total });
      d.appendChild(el('h3', null, k + ' latency (' + thousands(h.total) + ' ' + ' from ' + h.source + ')'));
      var c = el('canvas', { 'data-kind': k });
      d.appendChild(c);
      d.appendChild(el('div', { class: 'notes' }, 'x: time, ' + fmtNs(h.col_ns) + ' per column; y: latency, one row per power of two; colour: count (log scale)'));
      body.appendChild(d);
      c.addEventListener('mousemove', function (e) {
        var cell = heatCell(h, c, e.offsetX, e.offsetY);
        if (!cell) { tip.hidden = true; return; }
        tip.textContent = k + ': ' + thousands(cell.n) + ' in [' + fmtNs(cell.lo) + ', ' + fmtNs(cell.lo * 2) + ')\nat ' + fmtSec(cell.t0) + ' – ' + fmtSec(cell.t1);
        tip.style.left = (e.clientX + 12) + 'px'; tip.style.top = (e.clientY + 14) + 'px'; tip.hidden = false;
      });
      c.addEventListener('mouseleave', function () { tip.hidden = true; });
      c._h = h;
    });
    if (!any) body.appendChild(el('div', { class: 'notes' }, 'no latency kind in this trace (syscall, bio, runq, func, offcpu, lock)'));
    drawHeatmaps();
  }
  var HM = { left: 70, bottom: 22, cellH: 12 };
  function heatCell(h, c, x, y) {
    var pw = c.clientWidth - HM.left, col = Math.floor((x - HM.left) / pw * h.columns), row = h.rows - 1 - Math.floor(y / HM.cellH);
    if (col < 0 || col >= h.columns || row < 0 || row >= h.rows) return null;
    var t0 = h.start_ns + col * h.col_ns;
    return { n: h.cells[col * h.rows + row], lo: Math.pow(2, h.min_exp + row), t0: t0, t1: t0 + h.col_ns };
  }
  function drawHeatmaps() {
    document.querySelectorAll('#heatmap-body canvas').forEach(function (c) {
      var h = c._h; if (!h) return;
      var W = Math.min(900, Math.max(400, ($('heatmap-body').clientWidth || 900) / 2 - 30)), H = h.rows * HM.cellH + HM.bottom;
      var dpr = window.devicePixelRatio || 1;
      c.width = W * dpr; c.height = H * dpr; c.style.width = W + 'px'; c.style.height = H + 'px';
      var g = c.getContext('2d'); g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.fillStyle = '#fff'; g.fillRect(0, 0, W, H);
      var pw = W - HM.left, cw = pw / h.columns, max = 1;
      for (var i = 0; i < h.cells.length; i++) if (h.cells[i] > max) max = h.cells[i];
      for (var col = 0; col < h.columns; col++) for (var r = 0; r < h.rows; r++) {
        var n = h.cells[col * h.rows + r];
        if (!n) continue;
        var f = Math.log(1 + n) / Math.log(1 + max);
        g.fillStyle = 'hsl(' + (50 - 50 * f) + ',90%,' + (85 - 45 * f) + '%)';
        g.fillRect(HM.left + col * cw, (h.rows - 1 - r) * HM.cellH, Math.ceil(cw), HM.cellH - 1);
      }
      g.fillStyle = '#5b6573'; g.font = '10px system-ui, sans-serif';
      for (r = 0; r < h.rows; r += Math.max(1, Math.ceil(h.rows / 12))) g.fillText(fmtNs(Math.pow(2, h.min_exp + r)), 2, (h.rows - r) * HM.cellH - 2);
      var end = h.start_ns + h.columns * h.col_ns;
      for (i = 0; i <= 4; i++) { var t = h.start_ns + (end - h.start_ns) * i / 4; g.fillText(fmtSec(t), HM.left + pw * i / 4 - (i === 4 ? 40 : 0), H - 6); }
      if (state.range) {
        var x0 = HM.left + (state.range[0] - h.start_ns) / (end - h.start_ns) * pw, x1 = HM.left + (state.range[1] - h.start_ns) / (end - h.start_ns) * pw;
        g.strokeStyle = '#2f6fb2'; g.lineWidth = 2; g.strokeRect(x0, 0, x1 - x0, h.rows * HM.cellH);
      }
    });
  }
  // Latency of a kind in the range, from its heat map cells (log2 resolution).
  function heatRange(h) {
    var counts = new Array(h.rows).fill(0), total = 0;
    for (var col = 0; col < h.columns; col++) {
      var t0 = h.start_ns + col * h.col_ns, t1 = t0 + h.col_ns;
      if (state.range && (t1 <= state.range[0] || t0 >= state.range[1])) continue;
      for (var r = 0; r < h.rows; r++) { counts[r] += h.cells[col * h.rows + r]; total += h.cells[col * h.rows + r]; }
    }
    function q(p) {
      var rank = Math.ceil(p * total), acc = 0;
      for (var r = 0; r < h.rows; r++) { acc += counts[r]; if (acc >= rank) return Math.pow(2, h.min_exp + r + 1); }
      return 0;
    }
    var top = -1; for (var r = h.rows - 1; r >= 0; r--) if (counts[r]) { top = r; break; }
    return { count: total, p50: total ? q(0.5) : 0, p99: total ? q(0.99) : 0, max: top >= 0 ? Math.pow(2, h.min_exp + top + 1) : 0 };
  }

  // ---------- tables ----------
  var nsCol = function (k, label) { return { k: k, label: label || k, num: true, f: function (v) { return v === null || v === undefined ? '—' : fmtNs(v); } }; };
  var numCol = function (k, label) { return { k: k, label: label || k, num: true, f: function (v) { return v === null || v === undefined ? '—' : thousands(v); } }; };
  function section(id, title, note) {
    var d = el('div', { id: id });
    d.appendChild(el('h3', null, title));
    if (note) d.appendChild(el('div', { class: 'notes' }, note));
    $('tables-body').appendChild(d);
    return d;
  }
  function renderTables() {
    // Latency, whole trace.
    var lat = [];
    (D.latency || []).forEach(function (r) { lat.push(Object.assign({}, r)); });
    kindsPresent().forEach(function (k) {
      (D.kinds[k].latency || []).forEach(function (r) { lat.push(Object.assign({ kind: k, source: 'events' + (k === 'syscall' || k === 'bio' || k === 'runq' ? ' (the slow ones)' : '') }, r)); });
    });
    var s = section('table-latency', 'Latency percentiles (whole trace, the command\'s filters)',
      'count, total and max exact; percentiles within 1.6% (events) or within their power of two (kernel histograms)');
    if (lat.length) s.appendChild(table('latency', [{ k: 'kind' }, { k: 'name', fn: true }, { k: 'source' }, numCol('count'), nsCol('p50_ns', 'p50'),
      nsCol('p90_ns', 'p90'), nsCol('p99_ns', 'p99'), nsCol('max_ns', 'max'), nsCol('total_ns', 'total')], lat,
    function (r) { if (r.stack !== undefined) showStacks(r.name, [{ title: 'stack', stack: r.stack }]); }));
    else s.appendChild(el('div', { class: 'notes' }, 'no latency kind in this trace'));
    section('table-range', 'In the selected range', 'select a range on the timeline (shift-drag) to fill this');
    // Locks.
    if (D.locks && D.locks.length) {
      s = section('table-locks', 'Locks (whole trace): waiters, and the thread that released the lock');
      var rows = D.locks.map(function (r) { return Object.assign({ waiter: place(r.stack), holder: r.waker === null ? '' : place(r.waker) }, r); });
      s.appendChild(table('locks', [{ k: 'waiter', fn: true }, { k: 'kind' }, { k: 'mutex' }, numCol('count'), nsCol('wait_ns', 'wait'),
        nsCol('wait_p99_ns', 'wait p99'), nsCol('hold_ns', 'hold'), nsCol('hold_p99_ns', 'hold p99'), { k: 'holder', fn: true, label: 'holder (releaser)' }], rows,
      function (r) {
        var p = [{ title: 'waiter', stack: r.stack }];
        if (r.waker !== null) p.push({ title: 'holder: the thread that released it, most often', stack: r.waker });
        showStacks('lock ' + r.mutex, p);
      }));
    }
    // Leaks.
    if (D.kinds && D.kinds.alloc) {
      s = section('table-leaks', 'Leaks (outstanding at the end of the recording or of their process)', D.leaks_note);
      var lrows = (D.leaks || []).map(function (r) { return Object.assign({ where: place(r.stack) }, r); });
      if (lrows.length) s.appendChild(table('leaks', [{ k: 'where', fn: true }, numCol('count'), { k: 'bytes', num: true, f: fmtBytes },
        nsCol('oldest_ns', 'oldest'), { k: 'alive', f: function (v) { return v ? 'yes' : 'no'; } }], lrows,
      function (r) { showStacks('leak: ' + fmtBytes(r.bytes), [{ title: 'allocated at', stack: r.stack }]); }));
    }
    section('table-top', 'Top stacks (the selected range)');
    renderRangeTables();
  }
  function renderRangeTables() {
    var top = $('table-top');
    if (!top) return;
    while (top.childNodes.length > 1) top.removeChild(top.lastChild);
    kindsPresent().forEach(function (k) {
      var m = D.kinds[k].measures[0], vals = stackValues(k, m.col), counts = stackValues(k, 0), rows = [];
      vals.forEach(function (v, st) { rows.push({ stack: st, where: place(st), count: counts.get(st) || 0, value: v }); });
      rows.sort(function (a, b) { return b.value - a.value; });
      rows = rows.slice(0, 20);
      var d = el('div', { 'data-kind': k });
      d.appendChild(el('h3', null, k + ' by ' + m.name));
      d.appendChild(table('top-' + k, [{ k: 'where', fn: true }, numCol('count'), { k: 'value', label: m.name, num: true, f: function (v) { return fmtVal(v, m.unit); } }], rows,
        function (r) { showStacks(k + ': ' + r.where, [{ title: 'stack', stack: r.stack }]); }));
      top.appendChild(d);
    });
    var rg = $('table-range');
    if (!rg) return;
    while (rg.childNodes.length > 1) rg.removeChild(rg.lastChild);
    if (!state.range) { rg.appendChild(el('div', { class: 'notes' }, 'select a range on the timeline (shift-drag) to fill this')); return; }
    var rows2 = [];
    kindsPresent().forEach(function (k) {
      var K = D.kinds[k], bw = K.bucket_ns, c = 0, a = 0;
      for (var i = 0; i < K.agg.length; i += 5) if (inRangeBucket(K.agg[i + 1], bw)) { c += K.agg[i + 2]; a += K.agg[i + 3]; }
      var r = { kind: k, count: c, total: fmtVal(a, K.measures[0].unit) };
      var h = D.heatmaps && D.heatmaps[k];
      if (h) { var q = heatRange(h); r.p50 = q.p50; r.p99 = q.p99; r.max = q.max; }
      rows2.push(r);
    });
    rg.appendChild(el('div', { class: 'notes' }, fmtSec(state.range[0]) + ' – ' + fmtSec(state.range[1]) + '; percentiles and max are the upper bounds of their power-of-two rows of the heat map'));
    rg.appendChild(table('range', [{ k: 'kind' }, numCol('count'), { k: 'total' }, nsCol('p50', 'p50 ≤'), nsCol('p99', 'p99 ≤'), nsCol('max', 'max ≤')], rows2, null));
  }

  // ---------- heap over time ----------
  // D.heap (html/mod.rs, heap_json): per time bucket the bytes live at its end (total) and
  // the most in it (max), the series of the stacks that held the most, per bucket the
  // stacks holding the most (holders), the peak and who held it (peak_holders).
  var HEAP_COLORS = ['#d68a1a', '#5b7fb8', '#3c9a4a', '#c0392b', '#8e5bb8', '#1a9c9c', '#b8860b', '#e0559b'];
  var HP = { left: 78, right: 12, top: 12, bottom: 22, h: 260 };
  var heapDrawn = null;
  function setupHeap() {
    var H = D.heap;
    if (!H || !H.total || !H.total.length) return;
    $('heap').hidden = false;
    var info = 'peak ' + (H.peak_bytes === null || H.peak_bytes === undefined ? 'n/a' : fmtBytes(H.peak_bytes) + ' (' + thousands(H.peak_bytes) + ' bytes) at ' + fmtSec(H.peak_ns)) +
      ' · ' + thousands(H.calls) + ' allocator calls' + (H.temporary === null || H.temporary === undefined ? '' : ', ' + thousands(H.temporary) + ' temporary') +
      (H.leaked_bytes ? ' · ' + fmtBytes(H.leaked_bytes) + ' leaked' : '') + (H.exact ? '' : ' · NOT exact: ' + (H.inexact || []).join('; '));
    $('heap-info').textContent = info;
    var lg = $('heap-legend');
    H.series.forEach(function (s, i) {
      var sp = el('span', { 'data-stack': s.stack });
      sp.appendChild(el('i', { style: 'background:' + HEAP_COLORS[i % HEAP_COLORS.length] }));
      sp.appendChild(document.createTextNode(place(s.stack)));
      sp.title = place(s.stack);
      lg.appendChild(sp);
    });
    var o = el('span'); o.appendChild(el('i', { style: 'background:#c9ced6' })); o.appendChild(document.createTextNode('other')); lg.appendChild(o);
    var c = $('heap-canvas');
    c.addEventListener('click', function (ev) {
      var r = c.getBoundingClientRect(), pw = r.width - HP.left - HP.right, x = ev.clientX - r.left;
      // On the peak's line: who held the peak itself (a bucket's end may be after it).
      if (heapDrawn && heapDrawn.peak_x !== null && Math.abs(x - heapDrawn.peak_x) <= 4) { heapPeak(); return; }
      var b = Math.floor((x - HP.left) / pw * H.total.length);
      if (b >= 0 && b < H.total.length) heapAt(b);
    });
    $('heap-peak').addEventListener('click', heapPeak);
    $('heap-peak').disabled = !(H.peak_holders && H.peak_holders.length);
    drawHeap();
    window.addEventListener('resize', drawHeap);
  }
  function drawHeap() {
    var H = D.heap, c = $('heap-canvas');
    var W = c.clientWidth || 900, Ht = HP.h, dpr = window.devicePixelRatio || 1;
    c.width = W * dpr; c.height = Ht * dpr; c.style.height = Ht + 'px';
    var g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, Ht);
    var n = H.total.length, pw = W - HP.left - HP.right, ph = Ht - HP.top - HP.bottom;
    var top = Math.max(1, H.peak_bytes || 0);
    H.max.forEach(function (v) { if (v > top) top = v; });
    var y = function (v) { return HP.top + ph - v / top * ph; };
    var bw = pw / n;
    for (var b = 0; b < n; b++) {
      var x = HP.left + b * bw, acc = 0;
      H.series.forEach(function (s, i) {
        var v = s.values[b];
        if (!v) return;
        g.fillStyle = HEAP_COLORS[i % HEAP_COLORS.length];
        g.fillRect(x, y(acc + v), Math.max(1, bw), y(acc) - y(acc + v));
        acc += v;
      });
      var other = H.total[b] - acc;
      if (other > 0) { g.fillStyle = '#c9ced6'; g.fillRect(x, y(acc + other), Math.max(1, bw), y(acc) - y(acc + other)); }
    }
    // The most live within each bucket.
    g.strokeStyle = '#333'; g.lineWidth = 1; g.beginPath();
    for (b = 0; b < n; b++) { var xx = HP.left + (b + 0.5) * bw; if (b) g.lineTo(xx, y(H.max[b])); else g.moveTo(xx, y(H.max[b])); }
    g.stroke();
    // Axes.
    g.fillStyle = '#5b6573'; g.font = '10px system-ui, sans-serif';
    for (var i = 0; i <= 4; i++) {
      var v = top * i / 4;
      g.fillText(fmtBytes(v), 2, y(v) + 3);
      g.fillRect(HP.left - 3, y(v), 3, 1);
      var t = n * H.bucket_ns * i / 4;
      g.fillText(fmtSec(t), HP.left + pw * i / 4 - (i === 4 ? 44 : 0), Ht - 6);
    }
    var peakX = null;
    if (H.peak_ns !== null && H.peak_ns !== undefined && H.peak_bytes) {
      peakX = HP.left + H.peak_ns / (n * H.bucket_ns) * pw;
      g.strokeStyle = '#d0021b'; g.lineWidth = 2; g.beginPath(); g.moveTo(peakX, HP.top); g.lineTo(peakX, HP.top + ph); g.stroke();
      g.fillStyle = '#d0021b'; g.font = 'bold 11px system-ui, sans-serif';
      var label = 'peak ' + fmtBytes(H.peak_bytes);
      g.fillText(label, Math.min(peakX + 4, W - HP.right - g.measureText(label).width), HP.top + 10);
    }
    heapDrawn = { buckets: n, top: top, peak_x: peakX, series: H.series.length };
  }
  function heapHolders(title, list, what) {
    var d = $('heap-holders');
    d.textContent = '';
    d.setAttribute('data-what', what);
    d.appendChild(el('h3', null, title));
    var rows = list.map(function (p) { return { stack: p[0], where: place(p[0]), bytes: p[1] }; });
    if (!rows.length) { d.appendChild(el('div', { class: 'notes' }, 'nothing was live then')); return; }
    d.appendChild(table('heap-holders', [{ k: 'where', fn: true }, { k: 'bytes', num: true, f: fmtBytes }], rows,
      function (r) { showStacks('live ' + fmtBytes(r.bytes), [{ title: 'allocated at', stack: r.stack }]); }));
  }
  function heapAt(b) {
    var H = D.heap, end = (b + 1) * H.bucket_ns;
    heapHolders('Live at ' + fmtSec(end) + ': ' + fmtBytes(H.total[b]) + ' (the stacks holding the most)', H.holders[b] || [], 'bucket ' + b);
  }
  function heapPeak() {
    var H = D.heap;
    heapHolders('Who held the peak: ' + fmtBytes(H.peak_bytes) + ' at ' + fmtSec(H.peak_ns), H.peak_holders || [], 'peak');
  }

  // ---------- start ----------
  function start() {
    renderSummary();
    renderThreads();
    renderRequests();
    setupTimeline();
    drawTimeline();
    setupFlameControls();
    setupHeatmaps();
    setupHeap();
    renderTables();
    // For scripts and tests: the state, what the timeline drew, and a way to select.
    window.ebtraceReport = {
      data: D, state: state, setRange: setRange, selectKind: selectKind,
      timeline: function () { return drawnInfo; },
      heap: function () { return heapDrawn; }, heapAt: heapAt, heapPeak: heapPeak,
      setView: function (a, b) { TL.view = [a, b]; drawTimeline(); }
    };
    document.body.setAttribute('data-ready', '1');
  }
  try { start(); } catch (e) {
    document.body.setAttribute('data-error', String(e && e.stack || e));
    throw e;
  }
})();
