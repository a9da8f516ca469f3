// Opens an `ebsym report` page in headless Chromium (playwright-core driving the system's
// /usr/bin/chromium) from disk with the network off, clicks through it like a person and
// prints what it saw as one JSON line for the Rust test (ebrec/tests/e2e/report_html.rs):
//   node report_html.js REPORT.html MODULES_DIR OUT_DIR NAME
// MODULES_DIR is where `npm install playwright-core` put node_modules; screenshots go to
// OUT_DIR/NAME-*.png. Every request that is not for a file: URL is aborted and counted.
'use strict';
const path = require('path');
const [, , html, modules, outDir, name] = process.argv;
const { chromium } = require(require.resolve('playwright-core', { paths: [modules] }));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const out = { requests: [], errors: [], screenshots: [] };
  try {
    const context = await browser.newContext({ viewport: { width: 1500, height: 1000 } });
    await context.setOffline(true);
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file:')) return route.continue();
      out.requests.push(url);
      return route.abort();
    });
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') out.errors.push('console: ' + m.text()); });
    page.on('pageerror', (e) => out.errors.push('page: ' + e.message));
    const shot = async (what, locator) => {
      const file = path.join(outDir, `${name}-${what}.png`);
      if (locator) await page.locator(locator).screenshot({ path: file });
      else await page.screenshot({ path: file, fullPage: true });
      out.screenshots.push(file);
    };
    const t0 = Date.now();
    await page.goto('file://' + path.resolve(html));
    await page.waitForSelector('body[data-ready], body[data-error]', { timeout: 30000 });
    out.load_ms = Date.now() - t0;
    out.error = await page.getAttribute('body', 'data-error');

    // Summary.
    out.summary = await page.evaluate(() => {
      const kv = {};
      document.querySelectorAll('#summary dd[data-key]').forEach((d) => { kv[d.dataset.key] = d.textContent; });
      const table = (id) => Array.from(document.querySelectorAll(`table[data-table="${id}"] tbody tr`))
        .map((tr) => Array.from(tr.children).map((td) => td.textContent));
      return {
        kv,
        events: table('events'),
        losses: table('losses'),
        unresolved: table('unresolved'),
        findings: Array.from(document.querySelectorAll('#findings li')).map((l) => [l.dataset.family, l.textContent]),
      };
    });
    await shot('summary', '#summary');

    // Threads: each group's bar of parts; a click on one part (THREAD_PART: group/part, e.g.
    // sleeper/off: sleep) shows its top stacks in the panel.
    out.threads = await page.evaluate(() => Array.from(document.querySelectorAll('#threads-body .tgroup')).map((d) => ({
      thread: d.dataset.thread,
      process: d.dataset.process,
      threads: Number(d.dataset.threads),
      title: d.querySelector('h3').textContent,
      bar: Array.from(d.querySelectorAll('.tbar span')).map((s) => ({ part: s.dataset.part, ns: Number(s.dataset.ns), width: parseFloat(s.style.width) })),
      rows: Array.from(d.querySelectorAll('table tbody tr')).map((tr) => Array.from(tr.children).map((td) => td.textContent)),
    })));
    out.threads_note = await page.$$eval('#threads-body > .notes', (d) => d.map((x) => x.textContent));
    await shot('threads', '#threads');
    if (process.env.THREAD_PART) {
      const i = process.env.THREAD_PART.indexOf('/');
      const [g, p] = [process.env.THREAD_PART.slice(0, i), process.env.THREAD_PART.slice(i + 1)];
      const seg = page.locator(`#threads-body .tgroup[data-thread="${g}"] .tbar span[data-part="${p}"]`);
      if (await seg.count()) {
        await seg.first().click();
        out.threads_clicked = await page.evaluate(() => ({
          visible: !document.getElementById('stack-panel').hidden,
          title: document.getElementById('stack-title').textContent,
          frames: Array.from(document.querySelectorAll('#stack-body li')).map((li) => li.dataset.fn),
        }));
        await shot('threads-stack', null);
        await page.click('#stack-close');
      }
    }

    // Requests (a trace recorded with --request): the latency line, the kernel's split bar,
    // the tail's and the slowest's tables; the slowest request clicked shows its stacks and
    // wakers in the panel.
    out.requests_section = await page.evaluate(() => {
      if (document.getElementById('requests').hidden) return null;
      const table = (id) => Array.from(document.querySelectorAll(`table[data-table="${id}"] tbody tr`))
        .map((tr) => Array.from(tr.children).map((td) => td.textContent));
      const latency = document.querySelector('[data-key="requests-latency"]');
      return {
        latency: latency ? latency.textContent : null,
        split: Array.from(document.querySelectorAll('[data-key="requests-split"] span'))
          .map((s) => ({ part: s.dataset.part, ns: Number(s.dataset.ns) })),
        tail: table('requests-tail'),
        slowest: table('requests-slowest'),
      };
    });
    if (out.requests_section && out.requests_section.slowest.length) {
      await shot('requests', '#requests');
      await page.click('table[data-table="requests-slowest"] tbody tr');
      out.requests_section.clicked = await page.evaluate(() => ({
        visible: !document.getElementById('stack-panel').hidden,
        title: document.getElementById('stack-title').textContent,
        parts: Array.from(document.querySelectorAll('#stack-body h3')).map((h) => h.textContent),
      }));
      await shot('requests-stack', null);
      await page.click('#stack-close');
    }

    // Flame graphs: each kind's tab, its total and its frames' names.
    out.flame = {};
    const tabs = await page.$$eval('#flame-tabs button', (b) => b.map((x) => x.dataset.kind));
    for (const k of tabs) {
      await page.click(`#flame-tabs button[data-kind="${k}"]`);
      out.flame[k] = await page.evaluate(() => ({
        total: Number(document.getElementById('flame-total').dataset.total),
        names: Array.from(new Set(Array.from(document.querySelectorAll('#flame-graph .fr')).map((d) => d.dataset.name))),
      }));
    }
    const main = tabs.includes('offcpu') ? 'offcpu' : tabs.includes('alloc') ? 'alloc' : tabs[0];
    if (main) {
      await page.click(`#flame-tabs button[data-kind="${main}"]`);
      await shot('flame', '#flame');
    }

    // Click a frame (the test names it in FRAME): zoom and the stack panel.
    const want = process.env.FRAME;
    if (want && main) {
      const sel = await page.evaluate((w) => {
        const d = Array.from(document.querySelectorAll('#flame-graph .fr')).find((x) => x.dataset.name === w || x.dataset.name.startsWith(w + '('));
        return d ? d.dataset.name : null;
      }, want);
      out.clicked = sel;
      if (sel) {
        const before = await page.$$eval('#flame-graph .fr', (d) => d.length);
        await page.click(`#flame-graph .fr[data-name="${sel.replace(/"/g, '\\"')}"]`);
        out.zoom = { before, after: await page.$$eval('#flame-graph .fr', (d) => d.length),
          width: await page.$eval(`#flame-graph .fr[data-name="${sel.replace(/"/g, '\\"')}"]`, (d) => d.style.width) };
        out.panel = await page.evaluate(() => ({
          visible: !document.getElementById('stack-panel').hidden,
          title: document.getElementById('stack-title').textContent,
          frames: Array.from(document.querySelectorAll('#stack-body li')).map((li) => ({
            fn: li.dataset.fn,
            loc: (li.querySelector('.loc') || {}).textContent || null,
            selected: li.classList.contains('sel'),
          })),
        }));
        await shot('stack', null);
        await page.click('#flame-reset');
      }
    }
    // Search.
    if (process.env.SEARCH && main) {
      await page.fill('#flame-search', process.env.SEARCH);
      out.search = await page.evaluate(() => ({
        text: document.getElementById('flame-match').textContent,
        matched: Number(document.getElementById('flame-match').dataset.matched || 0),
        highlighted: document.querySelectorAll('#flame-graph .fr.match').length,
      }));
      await shot('search', '#flame');
      await page.fill('#flame-search', '');
    }

    // Timeline: what it drew.
    await page.click('#stack-close').catch(() => {});
    out.timeline = await page.evaluate(() => window.ebtraceReport.timeline());
    out.timeline_notes = await page.$$eval('#timeline-notes div', (d) => d.map((x) => x.textContent));
    await shot('timeline', '#timeline');

    // Heat maps and tables.
    out.heatmaps = await page.$$eval('#heatmap-body .heat', (d) => d.map((x) => ({ kind: x.dataset.kind, total: Number(x.dataset.total) })));
    out.tables = await page.evaluate(() => {
      const t = {};
      document.querySelectorAll('table[data-table]').forEach((x) => {
        t[x.dataset.table] = Array.from(x.querySelectorAll('tbody tr')).map((tr) => Array.from(tr.children).map((td) => td.textContent));
      });
      return t;
    });
    // Sorting: the first numeric column of the first top-stacks table, clicked twice.
    const sortable = await page.$('#table-top table th[data-col="count"]');
    if (sortable) {
      const col = async () => page.$eval('#table-top table', (t) => Array.from(t.querySelectorAll('tbody tr')).map((tr) => tr.children[1].textContent));
      await sortable.click();
      const desc = await col();
      await sortable.click();
      const asc = await col();
      out.sort = { desc, asc };
    }
    await shot('tables', '#tables');
    await shot('heatmaps', '#heatmaps');

    // A range: shift-drag over the middle of the timeline's time axis.
    if (main) {
      await page.click(`#flame-tabs button[data-kind="${main}"]`);
      const whole = Number(await page.getAttribute('#flame-total', 'data-total'));
      await page.locator('#timeline-canvas').scrollIntoViewIfNeeded();
      const box = await page.locator('#timeline-canvas').boundingBox();
      // The range: around the first two timeline events of thread RANGE_TID (else the
      // middle of the axis), in the view's coordinates (190 px of labels on the left).
      const span = await page.evaluate(([k, tid]) => {
        const r = window.ebtraceReport, a = r.data.kinds[k].timeline, ev = [];
        for (let i = 0; i < a.length; i += 8) if (String(a[i + 2]) === tid) ev.push(a[i]);
        ev.sort((x, y) => x - y);
        const view = r.timeline().view;
        if (ev.length < 3) return { view, t: null };
        return { view, t: [ev[0] - (ev[1] - ev[0]) / 4, ev[1] + (ev[2] - ev[1]) / 4] };
      }, [main, process.env.RANGE_TID || '']);
      const pw = box.width - 190, xAt = (t) => box.x + 190 + (t - span.view[0]) / (span.view[1] - span.view[0]) * pw;
      const x0 = span.t ? xAt(span.t[0]) : box.x + 190 + pw * 0.35;
      const x1 = span.t ? xAt(span.t[1]) : box.x + 190 + pw * 0.65;
      const y = box.y + 60;
      await page.keyboard.down('Shift');
      await page.mouse.move(x0, y);
      await page.mouse.down();
      await page.mouse.move((x0 + x1) / 2, y, { steps: 4 });
      await page.mouse.move(x1, y, { steps: 4 });
      await page.mouse.up();
      await page.keyboard.up('Shift');
      out.range = {
        kind: main,
        whole,
        selected: Number(await page.getAttribute('#flame-total', 'data-total')),
        state: await page.evaluate(() => window.ebtraceReport.state.range),
        text: await page.textContent('#range-text'),
        range_table: await page.$$eval('table[data-table="range"] tbody tr', (r) => r.map((tr) => Array.from(tr.children).map((td) => td.textContent))),
      };
      await shot('range', null);
      if (await page.isVisible('#range-clear')) await page.click('#range-clear');
      out.range.cleared = Number(await page.getAttribute('#flame-total', 'data-total'));
    }

    // The heap over time (a trace with allocations): what it drew, who held the peak (the
    // button), and who held the heap at the peak's time (a click on the chart there).
    if (await page.isVisible('#heap')) {
      const rows = () => page.$$eval('table[data-table="heap-holders"] tbody tr',
        (r) => r.map((tr) => Array.from(tr.children).map((td) => td.textContent)));
      out.heap = { drawn: await page.evaluate(() => window.ebtraceReport.heap()), info: await page.textContent('#heap-info'),
        legend: await page.$$eval('#heap-legend span', (s) => s.map((x) => x.textContent)) };
      await page.click('#heap-peak');
      out.heap.peak = { title: await page.textContent('#heap-holders h3'), rows: await rows() };
      await page.locator('#heap-canvas').scrollIntoViewIfNeeded();
      const box = await page.locator('#heap-canvas').boundingBox();
      await page.mouse.click(box.x + out.heap.drawn.peak_x, box.y + box.height / 2);
      out.heap.at_peak = { what: await page.getAttribute('#heap-holders', 'data-what'), title: await page.textContent('#heap-holders h3'), rows: await rows() };
      // The last time bucket with bytes live and clear of the peak's line (the process's
      // blocks are gone after its exit).
      const pw = box.width - 78 - 12;
      const last = await page.evaluate(([pw, peakX]) => {
        const H = window.ebtraceReport.data.heap, n = H.total.length;
        let b = n - 1;
        while (b > 0 && (!H.total[b] || Math.abs(78 + (b + 0.5) / n * pw - peakX) < 8)) b--;
        return { b, n, total: H.total[b], held: H.holders[b].reduce((a, h) => a + h[1], 0), holders: H.holders[b].length };
      }, [pw, out.heap.drawn.peak_x]);
      await page.mouse.click(box.x + 78 + (last.b + 0.5) / last.n * pw, box.y + box.height / 2);
      out.heap.at_end = { bucket: last.b, total: last.total, held: last.held, holders: last.holders, what: await page.getAttribute('#heap-holders', 'data-what'), title: await page.textContent('#heap-holders h3'), rows: await rows() };
      await page.click('#heap-peak');
      const first = await page.$('table[data-table="heap-holders"] tbody tr');
      if (first) {
        await first.click();
        out.heap.panel = await page.evaluate(() => Array.from(document.querySelectorAll('#stack-body li')).map((li) => li.dataset.fn));
        await page.click('#stack-close').catch(() => {});
      }
      await shot('heap', '#heap');
    }

    // The differential view (with --base).
    if (await page.isVisible('#flame-diff-label')) {
      await page.check('#flame-diff');
      out.diff = await page.evaluate(() => {
        const bg = Array.from(document.querySelectorAll('#flame-graph .fr')).map((d) => d.style.background || d.style.backgroundColor);
        return {
          text: document.getElementById('flame-total').textContent,
          total: Number(document.getElementById('flame-total').dataset.total),
          red: bg.filter((c) => /^rgb\(255, \d+, \d+\)$/.test(c) && !/^rgb\(255, 255, 255\)$/.test(c)).length,
          blue: bg.filter((c) => /^rgb\(\d+, \d+, 255\)$/.test(c)).length,
          names: Array.from(document.querySelectorAll('#flame-graph .fr')).map((d) => d.dataset.name),
        };
      });
      await shot('diff', '#flame');
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((e) => { console.error(e); process.exit(1); });
