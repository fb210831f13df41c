// mha sweep report: a sweep's results.jsonl rows (inline, sweep_view.cpp) charted
// with Chart.js (Debian's libjs-chart.js, inlined): any numeric column against a
// swept key, one line per value of another. Runs that share x and the group but
// differ in a third swept key are their own series (never averaged, unless that
// key is chosen under "mean over"), and an x whose values are not numbers
// (checkpoints, texts) is categorical, its points not joined, as the PNG
// (sweep_chart) does. With repeated
// timings (D.ranges, sweep_view.cpp's y_range), compute_ms is the median with
// a min-to-max error bar at each point (drawn by the errorBars plugin below:
// Chart.js 3.9 has none of its own). window.mhaChart is the Chart.js
// instance, for tests; each dataset's `ranges` holds its bars' [lo, hi].
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('mha-data').textContent);
  const $ = (id) => document.getElementById(id);
  const COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1',
                  '#ff9da7', '#9c755f', '#bab0ac'];  // Tableau 10, as the PNG (kTableau10)
  const ok = D.rows.filter((r) => r.status === 'ok');
  const text = (v) => (typeof v === 'string' ? v : JSON.stringify(v));
  let chart = null;

  function numericKey(key) { return ok.every((r) => !(key in r) || typeof r[key] === 'number'); }

  // Series as sweep_chart builds them: name -> Map(x -> [sum, count, lo, hi]).
  function distinct(key) { return new Set(ok.filter((r) => key in r).map((r) => JSON.stringify(r[key]))).size; }

  function series(y, x, group, mean) {
    const order = [], points = new Map(), categories = [];
    // The keys that split series: the group, then every other swept key that varies.
    const split = (group ? [group] : []).concat(
      D.swept_keys.filter((k) => k !== x && k !== group && k !== mean && distinct(k) > 1));
    const numericX = x === 'index' || numericKey(x);
    const range = (D.ranges || {})[y];
    const finite = (v) => typeof v === 'number' && Number.isFinite(v);
    const add = (name, xv, yv, lo, hi) => {
      if (!points.has(name)) { points.set(name, new Map()); order.push(name); }
      const p = points.get(name);
      if (!p.has(xv)) p.set(xv, [0, 0, Infinity, -Infinity]);
      const e = p.get(xv);
      if (finite(yv)) { e[0] += yv; e[1] += 1; }
      if (finite(lo) && finite(hi)) { e[2] = Math.min(e[2], lo); e[3] = Math.max(e[3], hi); }
    };
    for (const r of ok) {
      if (!(x in r) || !(y in r)) continue;
      let xv;
      if (numericX) xv = r[x];
      else {
        const t = text(r[x]);
        if (!categories.includes(t)) categories.push(t);
        xv = categories.indexOf(t);
      }
      const g = split.map((k) => k + '=' + (k in r ? text(r[k]) : '?')).join(' · ');
      const yv = r[y];
      if (range && range.value in r) add(g || y, xv, r[range.value], r[range.lo], r[range.hi]);
      else if (Array.isArray(yv)) {
        // One line per head, or per layer for a *_per_layer column (as sweep_view.cpp).
        const per = y.endsWith('_per_layer') ? 'layer ' : 'head ';
        yv.forEach((v, i) => add((g ? g + ' · ' : '') + per + i, xv, v));
      }
      else if (typeof yv === 'boolean') add(g || y, xv, yv ? 1 : 0);
      else if (typeof yv === 'number') add(g || y, xv, yv);
    }
    // A part every series shares (method=loss when only loss runs have a perplexity)
    // names nothing apart: it is left out of the legend, as in the PNG.
    const shown = (name) => {
      if (order.length < 2) return name;
      const kept = name.split(' · ').filter((p) => !order.every((o) => o.split(' · ').includes(p)));
      return kept.length ? kept.join(' · ') : name;
    };
    return {
      categories,
      ranged: !!range,
      sets: order.map((name) => {
        const entries = [...points.get(name).entries()].sort((a, b) => a[0] - b[0]);
        return {
          name: shown(name),
          points: entries.map(([xv, [sum, n]]) => ({ x: xv, y: n ? sum / n : null })),
          counts: entries.map(([, [, n]]) => n),
          ranges: range ? entries.map(([, [, , lo, hi]]) => (lo <= hi ? [lo, hi] : null)) : null,
        };
      }),
    };
  }

  // A dataset's `ranges` as vertical bars with caps, in its colour, over its points.
  const errorBars = {
    id: 'errorBars',
    afterDatasetsDraw(c) {
      const ctx = c.ctx, yScale = c.scales.y;
      c.data.datasets.forEach((ds, i) => {
        const meta = c.getDatasetMeta(i);
        if (!ds.ranges || meta.hidden) return;
        ctx.save();
        ctx.strokeStyle = ds.borderColor;
        ctx.lineWidth = 1.5;
        ds.ranges.forEach((r, j) => {
          const p = meta.data[j];
          if (!r || !p || ds.data[j].y === null) return;
          const top = yScale.getPixelForValue(r[1]), bottom = yScale.getPixelForValue(r[0]);
          ctx.beginPath();
          ctx.moveTo(p.x, top); ctx.lineTo(p.x, bottom);
          ctx.moveTo(p.x - 5, top); ctx.lineTo(p.x + 5, top);
          ctx.moveTo(p.x - 5, bottom); ctx.lineTo(p.x + 5, bottom);
          ctx.stroke();
        });
        ctx.restore();
      });
    },
  };

  function draw() {
    const y = $('y').value, x = $('x').value, group = $('group').value, mean = $('mean').value;
    const { categories, ranged, sets } = series(y, x, group, mean === x || mean === group ? '' : mean);
    const logX = $('log-x').checked && categories.length === 0, logY = $('log-y').checked;
    const datasets = sets.map((s, i) => ({
      label: s.name, data: s.points, ranges: s.ranges, showLine: categories.length === 0, spanGaps: false,
      borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length],
      borderWidth: 2, pointRadius: 4,
    }));
    // The bars' ends are inside the y axis (Chart.js fits the axis to the points only).
    const ends = sets.flatMap((s) => (s.ranges || []).filter((r) => r).flat());
    const rangeText = (c) => {
      const r = c.dataset.ranges && c.dataset.ranges[c.dataIndex];
      return r ? ' (median; min ' + r[0] + ', max ' + r[1] + ')' : '';
    };
    const config = {
      type: 'scatter',
      data: { datasets },
      plugins: [errorBars],
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {
          title: { display: true, text: y + (ranged ? ' (median, bars: min to max)' : '') + ' against ' + x + (group ? ' for each ' + group : '') + (mean && mean !== x && mean !== group ? ', mean over ' + mean : '') },
          tooltip: { callbacks: { label: (c) => c.dataset.label + ': ' + x + ' = ' + (categories.length ? categories[c.parsed.x] : c.parsed.x) + ', ' + y + ' = ' + c.parsed.y + rangeText(c) } },
        },
        scales: {
          x: { type: logX ? 'logarithmic' : 'linear', title: { display: true, text: x },
               ...(categories.length ? { min: -0.5, max: categories.length - 0.5 } : {}),
               // One tick per category, at its position, named by it.
               ...(categories.length ? { afterBuildTicks: (s) => { s.ticks = categories.map((_, i) => ({ value: i })); } } : {}),
               ticks: categories.length ? { autoSkip: false, callback: (v) => categories[v] ?? '' } : {} },
          y: { type: logY ? 'logarithmic' : 'linear', title: { display: true, text: y + (ranged ? ' (median)' : '') },
               suggestedMin: ends.length ? Math.min(...ends) : undefined,
               suggestedMax: ends.length ? Math.max(...ends) : undefined },
        },
      },
    };
    if (chart) chart.destroy();
    chart = new Chart($('chart'), config);
    window.mhaChart = chart;
    const averaged = sets.some((s) => s.counts.some((n) => n > 1));
    $('chart-note').textContent = ok.length + ' finished runs' + (D.rows.length > ok.length ? ' (' + (D.rows.length - ok.length) + ' failed, not charted)' : '') +
      (averaged ? '; runs sharing ' + x + ' in a series' + (mean ? ' (differing in ' + mean + ')' : '') + ' are averaged into one point' : '');
  }

  function table() {
    const cols = ['name', 'status', ...D.swept_keys.filter((k) => k !== 'name' && k !== 'status'),
                  ...D.numeric_columns.filter((k) => !D.swept_keys.includes(k) && !Array.isArray(ok[0][k]))];
    const t = $('runs'), head = document.createElement('tr');
    for (const c of cols) { const th = document.createElement('th'); th.textContent = c; head.append(th); }
    t.append(head);
    for (const r of D.rows) {
      const tr = document.createElement('tr');
      for (const c of cols) {
        const td = document.createElement('td'), v = r[c];
        td.textContent = v === undefined || v === null ? '' : typeof v === 'number' && !Number.isInteger(v) ? v.toPrecision(5) : text(v);
        tr.append(td);
      }
      t.append(tr);
    }
  }

  function options(sel, list, chosen, extra) {
    for (const v of (extra || []).concat(list)) {
      const o = document.createElement('option'); o.value = v; o.textContent = v || '(none)'; sel.append(o);
    }
    sel.value = chosen;
  }

  try {
    $('title').textContent = 'mha sweep report · ' + D.title;
    $('subtitle').textContent = (D.description ? D.description + ' · ' : '') + D.rows.length + ' runs, swept: ' + D.swept_keys.join(', ') + ' · mha ' + D.version;
    options($('y'), D.numeric_columns, D.choice.y);
    options($('x'), D.swept_keys.concat(['index']), D.choice.x);
    options($('group'), D.swept_keys, D.choice.group, ['']);
    options($('mean'), D.swept_keys, D.choice.mean || '', ['']);
    for (const id of ['y', 'x', 'group', 'mean', 'log-x', 'log-y']) $(id).addEventListener('change', draw);
    draw();
    table();
    document.body.dataset.ready = '1';
  } catch (e) {
    $('error').hidden = false;
    $('error').textContent = 'The report could not be drawn: ' + e.message;
    console.error(e);
  }
})();
