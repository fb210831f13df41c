// mha view: the attention viewer. Reads the page's inline data (attention_view.cpp),
// unpacks each map set (base64 -> inflate -> unshuffle bytes -> typed array of
// shape (layers, B, h, T, S)) and draws heads, tokens, statistics and the run.
// Nothing is fetched from a network. window.mhaView exposes the state for tests.
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('mha-data').textContent);
  const $ = (id) => document.getElementById(id);
  const VIRIDIS = D.viridis;                      // 256 RGB entries, entry i at i / 255
  const NAN_RGB = [128, 128, 128];                // as the PNG plot draws NaN
  const PAD_RGB = [232, 232, 232];                // a padded batch row's padding: no token
  const HEAD_COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b',
                       '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#ad494a'];
  const GRID_PX = 168;     // a head's panel side in the grid, CSS pixels
  const DETAIL_PX = 640;   // the enlarged head's map side
  const THUMB_PX = 56;     // layer x head overview
  const TOKEN_MAX = 64;    // token view for T and S up to this
  const LOG_DECADES = 4;   // the log scale's floor: 1e-4 of the maximum
  // scale: the colour scale in force; scaleChosen once the user picks one in the selector,
  // which then wins over each map set's default (defaultScale).
  const state = { map: 0, layer: 0, batch: 0, scale: 'shared', scaleChosen: false, detail: null,
                  region: null, sort: { key: 'head', dir: 1 }, tokenHeads: null, neuron: null, image: null,
                  ready: false };
  let W = [];              // per map set: Float32Array or Float64Array
  let CAUSAL = [];         // per map set: isCausal(mi)

  // ---- data ----
  // base64 -> inflate -> bytes.
  async function inflate(b64) {
    const text = atob(b64);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  async function unpack(m) {
    const shuffled = await inflate(m.data);
    const item = m.dtype === 'float32' ? 4 : 8;
    const n = shuffled.length / item;
    if (n !== m.layers * m.B * m.h * m.T * m.S) throw new Error(m.name + ': data holds ' + n + ' weights, expected ' + m.layers * m.B * m.h * m.T * m.S);
    const out = new Uint8Array(shuffled.length);
    for (let k = 0; k < item; k++) {
      const base = k * n;
      for (let i = 0; i < n; i++) out[i * item + k] = shuffled[base + i];
    }
    return item === 4 ? new Float32Array(out.buffer) : new Float64Array(out.buffer);
  }
  const M = () => D.maps[state.map];
  // Offset of map (l, b, head) in its set's array.
  function mapOffset(m, l, b, head) { return (((l * m.B + b) * m.h + head) * m.T) * m.S; }
  function weight(mi, l, b, head, t, s) { const m = D.maps[mi]; return W[mi][mapOffset(m, l, b, head) + t * m.S + s]; }
  // A model run's padded batch: row b's real queries and keys (tokens.json's lengths; rows are
  // padded on the right). Cell (t, s) of a shrunk map is a block of factor × factor weights.
  function realQueries(m, b) { return m.query_lengths ? m.query_lengths[b] : Infinity; }
  function realKeys(m, b) { return m.key_lengths ? m.key_lengths[b] : Infinity; }
  function padded(m, b, t, s) {
    const f = m.factor || 1;
    return t * f >= realQueries(m, b) || s * f >= realKeys(m, b);
  }
  // The file's batch row of kept row b (mha view --batch_index keeps one).
  function fileRow(m, b) { return m.batch_rows ? m.batch_rows[b] : b; }

  // The shortest decimal that reads back as the stored value (float32 or float64).
  function exact(v, dtype) {
    if (Number.isNaN(v)) return 'NaN';
    if (dtype === 'float32') {
      for (let p = 1; p <= 9; p++) {
        const s = v.toPrecision(p);
        if (Math.fround(parseFloat(s)) === v) return String(parseFloat(s));
      }
    }
    return String(v);
  }
  function short(v) { return Number.isNaN(v) ? 'NaN' : (Math.abs(v) >= 0.001 || v === 0 ? v.toFixed(3) : v.toExponential(2)); }
  // A map set's own labels when it has them (an encoder-decoder's: target tokens on the decoder's
  // and the cross-attention's queries, source tokens on the encoder's and the cross-attention's
  // keys), else the page's.
  const own = (key) => { const m = D.maps[state.map]; return m && m[key] ? m[key] : null; };
  // A model run's tokens of the batch row shown (each row its own), or null.
  const ownRow = (key) => { const r = own(key); return r && r[state.batch] ? r[state.batch] : null; };
  function queryLabel(t) {
    const r = ownRow('row_query_labels');
    if (r) return r[t] !== undefined ? r[t] : null;
    const q = own('query_labels') || D.query_labels;
    return q.length ? q[t] : null;
  }
  // A model run's token as tokenizer.json spells it (the label is its decoded text), or null.
  function tokenPiece(i) {
    const r = ownRow('row_query_pieces');
    if (r) return r[i] !== undefined ? r[i] : null;
    const p = own('query_pieces') || D.query_pieces;
    return p && p.length ? p[i] : null;
  }
  function keyPiece(i) {
    const r = ownRow('row_key_pieces');
    if (r) return r[i] !== undefined ? r[i] : null;
    const p = own('key_pieces');
    if (p) return p.length ? p[i] : null;
    return !D.key_labels.length && M().S === M().T ? tokenPiece(i) : null;
  }
  function keyLabel(s) {
    const r = ownRow('row_key_labels');
    if (r) return r[s] !== undefined ? r[s] : null;
    const k = own('key_labels');
    if (k) return k.length ? k[s] : null;
    if (D.key_labels.length) return D.key_labels[s];
    if (D.query_labels.length && M().S === M().T) return D.query_labels[s];
    return null;
  }
  // A model run's maps of chosen layers and heads (run.json's attention.layers and .heads)
  // are named by the model's indices; other maps by their position.
  function chosen(m, key, n) {
    const a = D.run && D.run.attention;
    const ours = m.name === 'attention' || m.name === 'self_attention';
    return ours && a && Array.isArray(a[key]) && a[key].length === n ? a[key] : null;
  }
  function layerName(m, l) { const c = chosen(m, 'layers', m.layers); return String(c ? c[l] : l); }
  function headName(m, i) {
    if (!m.head_axis) return 'mean over heads';
    const c = chosen(m, 'heads', m.h);
    return 'head ' + (c ? c[i] : i);
  }

  // ---- colours ----
  // The range [lo, hi] of a set of maps: lo = min(0, smallest), hi = largest.
  function rangeOf(mi, l, b, heads) {
    const m = D.maps[mi], w = W[mi];
    let lo = 0, hi = -Infinity;
    for (const head of heads) {
      const o = mapOffset(m, l, b, head);
      for (let t = 0; t < m.T; t++) for (let s = 0; s < m.S; s++) {
        if (padded(m, b, t, s)) continue;  // padding takes no part in the colours
        const v = w[o + t * m.S + s];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    if (!(hi > lo)) hi = lo + 1;
    return [lo, hi];
  }
  // Causal: every map of the set (all layers, batch elements, heads) has no weight on a key
  // s > t, as run.json's `causal` statistic says; detected from the weights, so a bare .npy
  // and a model's maps are judged alike. A shrunk map's blocks above the diagonal hold only
  // such keys. NaN (fully masked rows) does not count against it.
  function isCausal(mi) {
    const m = D.maps[mi], w = W[mi];
    if (m.T < 2 || m.S < 2) return false;
    for (let o = 0; o < w.length; o += m.T * m.S) {
      for (let t = 0; t < m.T; t++) {
        for (let s = t + 1; s < m.S; s++) if (w[o + t * m.S + s] > 0 || w[o + t * m.S + s] < 0) return false;
      }
    }
    return true;
  }
  // Causal maps open on per_row: on a shared scale row 0's weight of 1 darkens the rest.
  function defaultScale(mi) { return CAUSAL[mi] ? 'per_row' : 'shared'; }

  // The colour scale in force for head `head` of (mi, l, b): x(v, t) is the position in
  // [0, 1] of weight v of query row t (NaN stays NaN). `shared` is rangeOf all heads of
  // (mi, l, b), computed once by the caller.
  function scaleOf(mi, l, b, head, shared) {
    const clamp = (x) => (x < 0 ? 0 : x > 1 ? 1 : x);
    if (state.scale === 'per_row') {
      const m = D.maps[mi], w = W[mi], o = mapOffset(m, l, b, head);
      const rowMax = new Float64Array(m.T);
      for (let t = 0; t < m.T; t++) {
        let hi = 0;
        for (let s = 0; s < m.S; s++) { const v = w[o + t * m.S + s]; if (v > hi && !padded(m, b, t, s)) hi = v; }
        rowMax[t] = hi;
      }
      // A row of zeros stays at the bottom of the scale.
      return { x: (v, t) => (Number.isNaN(v) ? NaN : rowMax[t] > 0 ? clamp(v / rowMax[t]) : 0) };
    }
    if (state.scale === 'log') {
      const hi = shared[1];
      return { range: shared,
               x: (v) => (Number.isNaN(v) ? NaN : v > 0 ? clamp(1 + Math.log10(v / hi) / LOG_DECADES) : 0) };
    }
    const range = state.scale === 'shared' ? shared : rangeOf(mi, l, b, [head]);
    return { range, x: (v) => (Number.isNaN(v) ? NaN : clamp((v - range[0]) / (range[1] - range[0]))) };
  }
  function colorAt(x) { return Number.isNaN(x) ? NAN_RGB : VIRIDIS[Math.round(x * 255)]; }
  function sharedRange(mi, l, b) { return rangeOf(mi, l, b, [...Array(D.maps[mi].h).keys()]); }

  // Draws region {t0, t1, s0, s1} of a head's map into `canvas`, at most `px`
  // cells per side: f map cells per drawn cell (block max, NaN if any NaN),
  // cell = pixels per drawn cell; a block shows the largest position on `scale` of its
  // weights (for per_row each against its own row). Returns the geometry hover needs.
  function drawMap(canvas, mi, l, b, head, region, px, scale, margin) {
    const m = D.maps[mi], w = W[mi];
    const R = region.t1 - region.t0, C = region.s1 - region.s0;
    const f = Math.max(1, Math.ceil(Math.max(R, C) / px));
    const rows = Math.ceil(R / f), cols = Math.ceil(C / f);
    const cell = Math.max(1, Math.min(48, Math.floor(px / Math.max(rows, cols))));
    const off = document.createElement('canvas');
    off.width = cols; off.height = rows;
    const octx = off.getContext('2d');
    const img = octx.createImageData(cols, rows);
    const o = mapOffset(m, l, b, head);
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        let v = -Infinity, real = false;
        const ta = region.t0 + i * f, tb = Math.min(region.t1, ta + f);
        const sa = region.s0 + j * f, sb = Math.min(region.s1, sa + f);
        for (let t = ta; t < tb && !Number.isNaN(v); t++) {
          for (let s = sa; s < sb; s++) {
            if (padded(m, b, t, s)) continue;
            real = true;
            const x = scale.x(w[o + t * m.S + s], t);
            if (Number.isNaN(x)) { v = NaN; break; }
            if (x > v) v = x;
          }
        }
        const c = real ? colorAt(v) : PAD_RGB, p = 4 * (i * cols + j);
        img.data[p] = c[0]; img.data[p + 1] = c[1]; img.data[p + 2] = c[2]; img.data[p + 3] = 255;
      }
    }
    octx.putImageData(img, 0, 0);
    const ml = margin ? margin.left : 0, mt = margin ? margin.top : 0;
    canvas.width = ml + cols * cell; canvas.height = mt + rows * cell;
    const ctx = canvas.getContext('2d');
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(off, ml, mt, cols * cell, rows * cell);
    const geo = { mi, l, b, head, region, f, rows, cols, cell, left: ml, top: mt };
    canvas.dataset.cell = cell; canvas.dataset.factor = f;
    canvas.dataset.left = ml; canvas.dataset.top = mt;
    canvas.mhaGeometry = geo;
    return geo;
  }

  // What the mouse is over: the map cells under (x, y) of a drawn canvas.
  function cellAt(canvas, event) {
    const g = canvas.mhaGeometry, r = canvas.getBoundingClientRect();
    const x = (event.clientX - r.left) * canvas.width / r.width - g.left;
    const y = (event.clientY - r.top) * canvas.height / r.height - g.top;
    const j = Math.floor(x / g.cell), i = Math.floor(y / g.cell);
    if (i < 0 || j < 0 || i >= g.rows || j >= g.cols) return null;
    const t0 = g.region.t0 + i * g.f, s0 = g.region.s0 + j * g.f;
    return { g, t0, t1: Math.min(g.region.t1, t0 + g.f), s0, s1: Math.min(g.region.s1, s0 + g.f) };
  }
  function tip(event, text) {
    const el = $('tooltip');
    if (!text) { el.hidden = true; return; }
    el.textContent = text;
    el.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - el.offsetWidth - 4);
    const y = Math.min(event.clientY + 14, window.innerHeight - el.offsetHeight - 4);
    el.style.left = x + 'px'; el.style.top = y + 'px';
  }
  // The file's sizes: a map longer than the page's side is held as blocks of
  // factor × factor weights (each their max), T × S of them.
  function fileT(m) { return m.factor > 1 ? m.T_file : m.T; }
  function fileS(m) { return m.factor > 1 ? m.S_file : m.S; }
  function describe(c) {
    const m = D.maps[c.g.mi], f = m.factor || 1;
    const lines = [headName(m, c.g.head) + (m.layer_axis ? ' · layer ' + layerName(m, c.g.l) : '') + ' · batch row ' + fileRow(m, c.g.b)];
    if (f > 1) {
      let v = -Infinity;
      for (let t = c.t0; t < c.t1; t++) for (let s = c.s0; s < c.s1; s++) {
        const x = weight(c.g.mi, c.g.l, c.g.b, c.g.head, t, s);
        if (Number.isNaN(x) || x > v) v = x;
      }
      lines.push('queries ' + c.t0 * f + '–' + (Math.min(c.t1 * f, m.T_file) - 1) + ', keys ' +
        c.s0 * f + '–' + (Math.min(c.s1 * f, m.S_file) - 1));
      lines.push('max weight ' + exact(v, m.dtype) + ' (the file\'s map is held as ' + f + ' × ' + f + ' blocks)');
    } else if (c.t1 - c.t0 === 1 && c.s1 - c.s0 === 1) {
      const q = queryLabel(c.t0), k = keyLabel(c.s0);
      lines.push('query ' + c.t0 + (q !== null ? ' "' + q + '"' : ''));
      lines.push('key ' + c.s0 + (k !== null ? ' "' + k + '"' : ''));
      lines.push('weight ' + exact(weight(c.g.mi, c.g.l, c.g.b, c.g.head, c.t0, c.s0), m.dtype) +
        (padded(m, c.g.b, c.t0, c.s0) ? ' (padding: this row has ' + Math.min(realQueries(m, c.g.b), m.T) + ' tokens)' : ''));
    } else {
      let v = -Infinity;
      for (let t = c.t0; t < c.t1; t++) for (let s = c.s0; s < c.s1; s++) {
        const x = weight(c.g.mi, c.g.l, c.g.b, c.g.head, t, s);
        if (Number.isNaN(x) || x > v) v = x;
      }
      lines.push('queries ' + c.t0 + '–' + (c.t1 - 1) + ', keys ' + c.s0 + '–' + (c.s1 - 1));
      lines.push('max weight ' + exact(v, m.dtype) + ' (zoom in for single cells)');
    }
    return lines.join('\n');
  }
  function hoverable(canvas) {
    canvas.addEventListener('mousemove', (e) => { const c = cellAt(canvas, e); tip(e, c && describe(c)); });
    canvas.addEventListener('mouseleave', (e) => tip(e, null));
  }

  // ---- the legend ----
  function drawLegend(range) {
    const bar = $('legend-bar'), ctx = bar.getContext('2d');
    for (let x = 0; x < bar.width; x++) {
      const c = VIRIDIS[Math.round(x / (bar.width - 1) * 255)];
      ctx.fillStyle = 'rgb(' + c.join(',') + ')';
      ctx.fillRect(x, 0, 1, bar.height);
    }
    const [lo, hi, note] = state.scale === 'shared'
      ? [short(range[0]), short(range[1]), 'linear, shared by the heads of this view']
      : state.scale === 'per_head'
        ? ['min(0, head min)', 'head max', 'linear, each head its own range (in its title)']
        : state.scale === 'per_row'
          ? ['0', 'row max', 'linear, each query row its own maximum']
          : ['1e-4·max = ' + short(range[1] * Math.pow(10, -LOG_DECADES)), 'max = ' + short(range[1]),
             'log10, ' + LOG_DECADES + ' decades, shared by the heads of this view; 0 at the bottom'];
    $('legend-lo').textContent = lo;
    $('legend-hi').textContent = hi;
    $('legend-note').textContent = note + (state.scale === defaultScale(state.map) && CAUSAL[state.map]
      ? ' (the default for causal maps)' : '');
    $('legend').dataset.scale = state.scale;
  }

  // ---- the grid of heads ----
  // A grid panel's axis labels: the batch row's own tokens (none on padded positions), every
  // k-th one where a cell is narrower than a legible line, none on a shrunk map or past 64
  // positions; null when there is nothing to label. margin: the text's width, at most 60 px.
  const GRID_FONT = '10px system-ui, "DejaVu Sans", sans-serif';
  function gridAxes(canvas, m) {
    const n = Math.max(m.T, m.S);
    if (m.factor > 1 || n > 64 || n > GRID_PX) return null;
    const cell = Math.max(1, Math.min(48, Math.floor(GRID_PX / n)));
    const step = Math.ceil(11 / cell);
    const q = [], k = [];
    const T = Math.min(m.T, realQueries(m, state.batch)), S = Math.min(m.S, realKeys(m, state.batch));
    for (let t = 0; t < T; t += step) { const x = queryLabel(t); if (x !== null && x !== undefined) q.push([t, String(x)]); }
    for (let s = 0; s < S; s += step) { const x = keyLabel(s); if (x !== null && x !== undefined) k.push([s, String(x)]); }
    if (!q.length && !k.length) return null;
    const ctx = canvas.getContext('2d');
    ctx.font = GRID_FONT;
    const side = (l) => l.length ? Math.min(60, Math.ceil(Math.max(...l.map(([, x]) => ctx.measureText(x).width))) + 6) : 0;
    return { q, k, margin: { left: side(q), top: side(k) } };
  }
  // x cut to `room` pixels with an ellipsis (squeezed text is illegible at 10 px).
  function fitText(ctx, x, room) {
    if (ctx.measureText(x).width <= room) return x;
    let n = x.length;
    while (n > 1 && ctx.measureText(x.slice(0, n - 1) + '…').width > room) n--;
    return x.slice(0, n - 1) + '…';
  }
  function drawGridLabels(canvas, g, axes) {
    const ctx = canvas.getContext('2d');
    ctx.fillStyle = '#1f2328';
    ctx.font = GRID_FONT;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (const [t, x] of axes.q) ctx.fillText(fitText(ctx, x, g.left - 4), g.left - 3, g.top + (t + 0.5) * g.cell);
    ctx.textAlign = 'left';
    for (const [s, x] of axes.k) {
      ctx.save();
      ctx.translate(g.left + (s + 0.5) * g.cell, g.top - 3);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(fitText(ctx, x, g.top - 4), 0, 0);
      ctx.restore();
    }
    canvas.dataset.queryLabels = axes.q.length; canvas.dataset.keyLabels = axes.k.length;
  }
  function drawGrid() {
    const m = M(), grid = $('grid');
    grid.textContent = '';
    const shared = sharedRange(state.map, state.layer, state.batch);
    drawLegend(shared);
    for (let head = 0; head < m.h; head++) {
      const fig = document.createElement('figure');
      fig.className = 'panel' + (state.detail === head ? ' selected' : '');
      const cap = document.createElement('figcaption');
      const scale = scaleOf(state.map, state.layer, state.batch, head, shared);
      cap.textContent = headName(m, head) + (state.scale === 'per_head' ? ' · ' + short(scale.range[0]) + '–' + short(scale.range[1]) : '');
      const canvas = document.createElement('canvas');
      canvas.dataset.head = head;
      const axes = gridAxes(canvas, m);
      const g = drawMap(canvas, state.map, state.layer, state.batch, head, { t0: 0, t1: m.T, s0: 0, s1: m.S }, GRID_PX, scale, axes && axes.margin);
      if (axes) drawGridLabels(canvas, g, axes);
      hoverable(canvas);
      canvas.addEventListener('click', () => openDetail(head));
      fig.append(cap, canvas);
      grid.append(fig);
    }
  }

  // ---- the enlarged head ----
  function openDetail(head) {
    const m = M();
    state.detail = head;
    $('head').value = head;
    state.region = { t0: 0, t1: m.T, s0: 0, s1: m.S };
    $('detail-section').hidden = false;
    drawGrid();
    drawDetail();
    $('detail-section').scrollIntoView({ block: 'nearest' });
  }
  function closeDetail() {
    state.detail = null;
    $('head').value = '';
    $('detail-section').hidden = true;
    drawGrid();
  }
  function drawDetail() {
    if (state.detail === null) return;
    const m = M(), r = state.region, canvas = $('detail');
    const scale = scaleOf(state.map, state.layer, state.batch, state.detail, sharedRange(state.map, state.layer, state.batch));
    const R = r.t1 - r.t0, C = r.s1 - r.s0;
    // Axis labels name single positions; a shrunk map's cells are blocks.
    const labels = !(m.factor > 1) && Math.max(R, C) <= 64 && DETAIL_PX / Math.max(R, C) >= 12;
    const margin = labels ? { left: 90, top: 90 } : { left: 0, top: 0 };
    const g = drawMap(canvas, state.map, state.layer, state.batch, state.detail, r, DETAIL_PX, scale, margin);
    if (labels) {
      const ctx = canvas.getContext('2d');
      ctx.fillStyle = '#1f2328';
      ctx.font = '11px system-ui, "DejaVu Sans", sans-serif';
      ctx.textBaseline = 'middle';
      ctx.textAlign = 'right';
      for (let t = r.t0; t < r.t1; t++) {
        const q = queryLabel(t);
        ctx.fillText((q !== null ? q + ' ' : '') + t, g.left - 4, g.top + (t - r.t0 + 0.5) * g.cell, g.left - 6);
      }
      for (let s = r.s0; s < r.s1; s++) {
        const k = keyLabel(s);
        ctx.save();
        ctx.translate(g.left + (s - r.s0 + 0.5) * g.cell, g.top - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = 'left';
        ctx.fillText((k !== null ? k + ' ' : '') + s, 0, 0, g.top - 6);
        ctx.restore();
      }
    }
    const F = m.factor || 1;
    $('detail-title').textContent = headName(m, state.detail) + (m.layer_axis ? ' · layer ' + layerName(m, state.layer) : '') +
      ' · queries ' + r.t0 * F + '–' + (Math.min(r.t1 * F, fileT(m)) - 1) + ', keys ' + r.s0 * F + '–' +
      (Math.min(r.s1 * F, fileS(m)) - 1) +
      (g.f * F > 1 ? ' · ' + g.f * F + '×' + g.f * F + ' weights per pixel block (max)' : ' · full resolution');
  }
  function setupDetail() {
    const canvas = $('detail');
    hoverable(canvas);
    let start = null;
    canvas.addEventListener('mousedown', (e) => { start = cellAt(canvas, e); e.preventDefault(); });
    window.addEventListener('mouseup', (e) => {
      if (!start) return;
      const end = cellAt(canvas, e) || start;
      const t0 = Math.min(start.t0, end.t0), t1 = Math.max(start.t1, end.t1);
      const s0 = Math.min(start.s0, end.s0), s1 = Math.max(start.s1, end.s1);
      start = null;
      if (t1 - t0 >= 1 && s1 - s0 >= 1 && (t1 - t0 < state.region.t1 - state.region.t0 || s1 - s0 < state.region.s1 - state.region.s0)) {
        state.region = { t0, t1, s0, s1 };
        drawDetail();
      }
    });
    canvas.addEventListener('wheel', (e) => {
      const c = cellAt(canvas, e);
      if (!c) return;
      e.preventDefault();
      const m = M(), r = state.region, k = e.deltaY < 0 ? 0.5 : 2;
      const zoom = (a0, a1, at, n) => {
        const len = Math.max(1, Math.min(n, Math.round((a1 - a0) * k)));
        let lo = Math.round(at - (at - a0) * len / (a1 - a0));
        lo = Math.max(0, Math.min(n - len, lo));
        return [lo, lo + len];
      };
      const [t0, t1] = zoom(r.t0, r.t1, c.t0, m.T), [s0, s1] = zoom(r.s0, r.s1, c.s0, m.S);
      state.region = { t0, t1, s0, s1 };
      drawDetail();
    }, { passive: false });
    $('zoom-out').addEventListener('click', () => { const m = M(); state.region = { t0: 0, t1: m.T, s0: 0, s1: m.S }; drawDetail(); });
    $('detail-close').addEventListener('click', closeDetail);
  }

  // ---- layers x heads ----
  function drawOverview() {
    const m = M(), table = $('overview');
    $('overview-section').hidden = !(m.layers > 1);
    if (m.layers <= 1) return;
    table.textContent = '';
    const head = document.createElement('tr');
    head.append(document.createElement('th'));
    for (let i = 0; i < m.h; i++) { const th = document.createElement('th'); th.textContent = headName(m, i); head.append(th); }
    table.append(head);
    for (let l = 0; l < m.layers; l++) {
      const tr = document.createElement('tr');
      const th = document.createElement('th'); th.textContent = 'layer ' + layerName(m, l); tr.append(th);
      const shared = sharedRange(state.map, l, state.batch);
      for (let i = 0; i < m.h; i++) {
        const td = document.createElement('td'), canvas = document.createElement('canvas');
        canvas.dataset.layer = l; canvas.dataset.head = i;
        drawMap(canvas, state.map, l, state.batch, i, { t0: 0, t1: m.T, s0: 0, s1: m.S }, THUMB_PX,
                scaleOf(state.map, l, state.batch, i, shared));
        hoverable(canvas);
        canvas.addEventListener('click', () => { state.layer = l; $('layer').value = l; render(); openDetail(i); });
        td.append(canvas); tr.append(td);
      }
      table.append(tr);
    }
  }

  // ---- tokens ----
  function drawTokens() {
    const m = M(), svg = $('tokens');
    const show = m.T <= TOKEN_MAX && m.S <= TOKEN_MAX;
    // A padded row's real tokens only.
    const T = Math.min(m.T, realQueries(m, state.batch)), S = Math.min(m.S, realKeys(m, state.batch));
    $('tokens-section').hidden = !show;
    if (!show) return;
    // Every head at first, unless that is too many lines to draw at once.
    if (!state.tokenHeads || state.tokenHeads.length !== m.h)
      state.tokenHeads = Array.from({ length: m.h }, (_, i) => i === 0 || m.h * m.T * m.S <= 20000);
    const picks = $('head-picks');
    picks.textContent = '';
    for (let i = 0; i < m.h; i++) {
      const label = document.createElement('label'), box = document.createElement('input'), sw = document.createElement('span');
      box.type = 'checkbox'; box.checked = state.tokenHeads[i]; box.dataset.head = i;
      box.addEventListener('change', () => { state.tokenHeads[i] = box.checked; drawTokens(); });
      sw.className = 'swatch'; sw.style.background = HEAD_COLORS[i % HEAD_COLORS.length];
      label.append(box, sw, document.createTextNode(headName(m, i)));
      picks.append(label);
    }
    const NS = 'http://www.w3.org/2000/svg', row = 22, width = 600, xq = 170, xk = 430;
    svg.textContent = '';
    svg.setAttribute('width', width);
    svg.setAttribute('height', Math.max(T, S) * row + 10);
    const lines = [];
    for (let i = 0; i < m.h; i++) {
      if (!state.tokenHeads[i]) continue;
      for (let t = 0; t < T; t++) for (let s = 0; s < S; s++) {
        const v = weight(state.map, state.layer, state.batch, i, t, s);
        if (!(v > 0.005)) continue;
        const line = document.createElementNS(NS, 'line');
        line.setAttribute('x1', xq + 6); line.setAttribute('y1', 10 + (t + 0.5) * row);
        line.setAttribute('x2', xk - 6); line.setAttribute('y2', 10 + (s + 0.5) * row);
        line.setAttribute('stroke', HEAD_COLORS[i % HEAD_COLORS.length]);
        line.setAttribute('stroke-width', 2);
        line.setAttribute('stroke-opacity', Math.min(1, v));
        line.dataset.query = t; line.dataset.key = s; line.dataset.head = i;
        lines.push(line); svg.append(line);
      }
    }
    const focus = (attr, idx, el) => {
      for (const line of lines) line.style.display = idx === null || line.dataset[attr] === String(idx) ? '' : 'none';
      for (const t of svg.querySelectorAll('text')) t.classList.toggle('active', t === el);
    };
    const text = (x, y, anchor, str, attr, idx) => {
      const el = document.createElementNS(NS, 'text');
      el.setAttribute('x', x); el.setAttribute('y', y); el.setAttribute('text-anchor', anchor);
      el.setAttribute('dominant-baseline', 'middle');
      el.textContent = str; el.dataset[attr] = idx;
      const piece = attr === 'query' ? tokenPiece(idx) : keyPiece(idx);
      if (piece !== null && piece !== undefined) {  // SVG's tooltip: a <title> child
        const tip = document.createElementNS(NS, 'title');
        tip.textContent = 'piece ' + JSON.stringify(piece);
        el.append(tip);
      }
      el.addEventListener('mouseenter', () => focus(attr, idx, el));
      el.addEventListener('mouseleave', () => focus(attr, null, null));
      svg.append(el);
    };
    for (let t = 0; t < T; t++) { const q = queryLabel(t); text(xq, 10 + (t + 0.5) * row, 'end', (q !== null ? q : 'q' + t), 'query', t); }
    for (let s = 0; s < S; s++) { const k = keyLabel(s); text(xk, 10 + (s + 0.5) * row, 'start', (k !== null ? k : 'k' + s), 'key', s); }
    // Room for every label: a long key past the right edge, a long query past the left, the last
    // row's descenders past the bottom (the box of what is drawn, 6 px around it).
    const box = svg.getBBox(), x0 = Math.min(0, Math.floor(box.x) - 6), y0 = Math.min(0, Math.floor(box.y) - 6);
    const x1 = Math.max(width, Math.ceil(box.x + box.width) + 6), y1 = Math.max(+svg.getAttribute('height'), Math.ceil(box.y + box.height) + 6);
    svg.setAttribute('width', x1 - x0); svg.setAttribute('height', y1 - y0);
    svg.setAttribute('viewBox', x0 + ' ' + y0 + ' ' + (x1 - x0) + ' ' + (y1 - y0));
  }

  // ---- the neuron view (bertviz's): how one query's weights come from q and k ----
  const NEURON_KEYS = 64;  // keys listed: every key up to this many, else the largest weights
  const FEATURE_PX = 5;    // a feature's width in the q, k and q × k strips
  let QK = null;           // D.qk's arrays: { q, k } Float32Array (layers, B, h, T, d)
  // The maps q and k belong to: a model run's self-attention of the same layers, heads and rows,
  // with run.json's rule (scale, soft-cap, mask) for the logits.
  function neuronFits(m) {
    const a = D.run && D.run.attention, qk = D.qk;
    return !!(QK && a && typeof a.scale === 'number' && (m.name === 'attention' || m.name === 'self_attention') &&
      !(m.factor > 1) && qk.layers === m.layers && qk.B === m.B && qk.h === m.h && qk.T === m.T && m.S === m.T);
  }
  function qkRow(which, l, b, head, t) {
    const qk = D.qk, o = (((l * qk.B + b) * qk.h + head) * qk.T + t) * qk.d;
    return QK[which].subarray(o, o + qk.d);
  }
  // Query t of head `head` (layer slot l, batch row b): for every key s, q . k in double, the
  // logit scale * q . k (soft-capped), whether the mask keeps the key (causal, key padding, the
  // layer's window), the softmax over the kept keys and the weight the run stored.
  function neuron(l, b, head, t) {
    const a = D.run.attention, qk = D.qk, T = qk.T;
    const window = (a.windows && a.windows[l]) || 0, cap = a.softcap || 0, len = qk.lengths[b];
    const q = qkRow('q', l, b, head, t), keys = [];
    let top = -Infinity;
    for (let s = 0; s < T; s++) {
      const k = qkRow('k', l, b, head, s);
      let dot = 0;
      for (let i = 0; i < qk.d; i++) dot += q[i] * k[i];
      let logit = a.scale * dot;
      if (cap > 0) logit = cap * Math.tanh(logit / cap);
      const kept = s < len && (!a.causal || s <= t) &&
        (!window || (a.causal ? t - s < window : Math.abs(t - s) < window));
      if (kept && logit > top) top = logit;
      keys.push({ s, k, dot, logit, kept });
    }
    let sum = 0;
    for (const key of keys) if (key.kept) sum += Math.exp(key.logit - top);
    for (const key of keys) {
      key.p = key.kept ? Math.exp(key.logit - top) / sum : 0;
      key.stored = weight(state.map, l, b, head, t, key.s);
    }
    return { q, keys, window, cap, len };
  }
  // Blue (negative) to white (0) to red (positive), |v| / most at full colour.
  function diverging(v, most) {
    const x = most > 0 ? Math.max(-1, Math.min(1, v / most)) : 0;
    const c = x >= 0 ? [214, 39, 40] : [31, 119, 180], f = Math.abs(x);
    return 'rgb(' + c.map((ch) => Math.round(255 + (ch - 255) * f)).join(',') + ')';
  }
  function strip(values, most, describe) {
    const c = document.createElement('canvas');
    c.width = values.length * FEATURE_PX; c.height = 12;
    const ctx = c.getContext('2d');
    values.forEach((v, i) => { ctx.fillStyle = diverging(v, most); ctx.fillRect(i * FEATURE_PX, 0, FEATURE_PX, 12); });
    c.addEventListener('mousemove', (e) => {
      const r = c.getBoundingClientRect(), i = Math.floor((e.clientX - r.left) * c.width / r.width / FEATURE_PX);
      tip(e, i >= 0 && i < values.length ? describe(i) : null);
    });
    c.addEventListener('mouseleave', (e) => tip(e, null));
    return c;
  }
  function drawNeuron() {
    const m = M(), section = $('neuron-section');
    section.hidden = !neuronFits(m);
    if (section.hidden) return;
    const qk = D.qk, l = state.layer, b = state.batch;
    if (state.neuron === null) {
      state.neuron = { head: state.detail !== null ? state.detail : 0, query: Math.max(0, qk.lengths[b] - 1) };
      fillSelect($('neuron-head'), m.h, (i) => headName(m, i));
      fillSelect($('neuron-query'), qk.T, (t) => { const q = queryLabel(t); return t + (q !== null ? ' ' + q : ''); });
    }
    const head = state.neuron.head, t = Math.min(state.neuron.query, qk.T - 1);
    $('neuron-head').value = head; $('neuron-query').value = t;
    const n = neuron(l, b, head, t), a = D.run.attention;
    $('neuron-rule').textContent = 'logit = ' + a.scale.toPrecision(6) + ' · q · k' +
      (n.cap > 0 ? ', then ' + n.cap + ' · tanh(logit / ' + n.cap + ')' : '') + '; softmax over the keys ' +
      (a.causal ? 's ≤ ' + t : 'of the row') + (n.window ? ' within ' + n.window + ' of the query' : '') +
      (n.len < qk.T ? ' before the padding (' + n.len + ' tokens)' : '');
    let shown = n.keys;
    if (shown.length > NEURON_KEYS)
      shown = shown.slice().sort((x, y) => y.p - x.p || x.s - y.s).slice(0, NEURON_KEYS).sort((x, y) => x.s - y.s);
    let mostQK = 0, mostProduct = 0;
    for (const v of n.q) mostQK = Math.max(mostQK, Math.abs(v));
    for (const key of shown) for (let i = 0; i < qk.d; i++) {
      mostQK = Math.max(mostQK, Math.abs(key.k[i]));
      mostProduct = Math.max(mostProduct, Math.abs(n.q[i] * key.k[i]));
    }
    const table = $('neuron');
    table.textContent = '';
    const head_row = document.createElement('tr');
    for (const label of ['key', 'k', 'q × k', 'q · k', 'logit', 'softmax', 'stored weight']) {
      const th = document.createElement('th'); th.textContent = label; head_row.append(th);
    }
    const qrow = document.createElement('tr');
    const qlabel = document.createElement('th'), qcell = document.createElement('td'), qrest = document.createElement('td');
    const ql = queryLabel(t);
    qlabel.textContent = 'query ' + t + (ql !== null ? ' ' + ql : '') + ': q';
    qcell.append(strip(n.q, mostQK, (i) => 'q[' + i + '] = ' + exact(n.q[i], 'float32')));
    qrest.colSpan = 5;
    qrow.append(qlabel, qcell, qrest);
    const thead = document.createElement('thead');
    thead.append(head_row, qrow);
    table.append(thead);
    const tbody = document.createElement('tbody');
    for (const key of shown) {
      const tr = document.createElement('tr');
      tr.className = key.kept ? '' : 'masked';
      tr.dataset.key = key.s;
      tr.dataset.dot = key.dot; tr.dataset.logit = key.logit; tr.dataset.p = key.p; tr.dataset.stored = key.stored;
      const cells = Array.from({ length: 7 }, () => document.createElement('td'));
      const kl = keyLabel(key.s);
      cells[0].className = 'token';
      cells[0].textContent = key.s + (kl !== null ? ' ' + kl : '');
      cells[1].append(strip(key.k, mostQK, (i) => 'k[' + i + '] = ' + exact(key.k[i], 'float32')));
      const product = Array.from(key.k, (v, i) => n.q[i] * v);
      cells[2].append(strip(product, mostProduct, (i) => 'q[' + i + '] × k[' + i + '] = ' +
        exact(n.q[i], 'float32') + ' × ' + exact(key.k[i], 'float32') + ' = ' + product[i].toPrecision(6)));
      cells[3].textContent = key.dot.toPrecision(5);
      cells[4].textContent = key.kept ? key.logit.toPrecision(5) : 'masked';
      const bar = document.createElement('span');
      bar.className = 'bar'; bar.style.width = Math.round(60 * key.p) + 'px';
      cells[5].append(bar, document.createTextNode(short(key.p)));
      cells[6].textContent = short(key.stored);
      cells[6].title = exact(key.stored, M().dtype);
      tr.append(...cells);
      tbody.append(tr);
    }
    table.append(tbody);
    if (shown.length < n.keys.length) {
      const tr = document.createElement('tr'), td = document.createElement('td');
      td.colSpan = 7; td.className = 'hint';
      td.textContent = 'the ' + NEURON_KEYS + ' keys of largest weight of ' + n.keys.length;
      tr.append(td); tbody.append(tr);
    }
  }
  function setupNeuron() {
    $('neuron-head').addEventListener('change', () => { state.neuron.head = +$('neuron-head').value; drawNeuron(); });
    $('neuron-query').addEventListener('change', () => { state.neuron.query = +$('neuron-query').value; drawNeuron(); });
    if (D.qk_note) { $('neuron-note').textContent = D.qk_note; $('neuron-note').hidden = false; }
  }

  // ---- a vision model's attention over its image ----
  const IMAGE_PX = 320;  // the longer side of the drawn image, CSS pixels
  let PIXELS = null;     // D.images' (B, H, W, 3) bytes
  // The map set drawn over the image: a query row over the keys [CLS, (DIST,) patch (0, 0), ...]
  // of the run's patch grid (run.json's input.patch_grid), one token per patch after the
  // `prefix` tokens before them (input.prefix_tokens: 1, or DeiT's 2; a page without it, as
  // mha.show's, counts them from the keys: 1 or 2 more than the patches).
  function imageGrid(m) {
    const input = D.run && D.run.input, g = input && input.patch_grid;
    if (!PIXELS || !Array.isArray(g) || m.factor > 1 || m.B !== D.images.B) return null;
    const [rows, cols] = g;
    const given = input.prefix_tokens, prefix = Number.isInteger(given) ? given : m.S - rows * cols;
    if (!Number.isInteger(given) && prefix !== 1 && prefix !== 2) return null;
    return m.S === prefix + rows * cols ? { rows, cols, prefix } : null;
  }
  // Query t's weights on the patches, (rows, cols) row-major over the grid, of one head or the
  // mean over heads ('mean'), divided by their largest (the CLS and DIST keys left out), and
  // that largest.
  function overlay(l, b, head, t) {
    const m = M(), grid = imageGrid(m), n = grid.rows * grid.cols;
    const heads = head === 'mean' ? [...Array(m.h).keys()] : [head];
    const v = new Float64Array(n);
    for (const i of heads) for (let p = 0; p < n; p++) v[p] += weight(state.map, l, b, i, t, grid.prefix + p) / heads.length;
    let most = 0;
    for (const x of v) if (x > most) most = x;
    return { values: Array.from(v, (x) => (most > 0 ? x / most : 0)), most, rows: grid.rows, cols: grid.cols, prefix: grid.prefix };
  }
  function drawImage() {
    const m = M(), grid = imageGrid(m), section = $('image-section');
    section.hidden = !grid;
    if (!grid) return;
    const im = D.images, b = state.batch;
    if (state.image === null) {
      state.image = { query: 0, head: 'mean', alpha: 0.6, smooth: 'bilinear' };
      fillSelect($('image-query'), m.T, (t) => { const q = queryLabel(t); return t + (q !== null ? ' ' + q : ''); });
      fillSelect($('image-head'), m.h, (i) => headName(m, i));
      if (m.head_axis) { const o = document.createElement('option'); o.value = 'mean'; o.textContent = 'mean over heads'; $('image-head').prepend(o); }
      else state.image.head = 0;
    }
    const t = Math.min(state.image.query, m.T - 1);
    $('image-query').value = t; $('image-head').value = state.image.head;
    const o = overlay(state.layer, b, state.image.head, t);
    // The image at its own pixels, then the grid's values upsampled bilinearly (patch centres
    // at their values) or as squares (nearest: each pixel its patch's value, the patch edges
    // sharp) and blended over it in viridis.
    const picture = $('image-picture'), blended = $('image-overlay');
    const base = new ImageData(im.W, im.H), mixed = new ImageData(im.W, im.H);
    const a = state.image.alpha, off = b * im.H * im.W * 3;
    const at = (r, c) => o.values[Math.max(0, Math.min(o.rows - 1, r)) * o.cols + Math.max(0, Math.min(o.cols - 1, c))];
    for (let y = 0; y < im.H; y++) {
      const gy = (y + 0.5) * o.rows / im.H - 0.5, r0 = Math.floor(gy), fy = gy - r0;
      for (let x = 0; x < im.W; x++) {
        const gx = (x + 0.5) * o.cols / im.W - 0.5, c0 = Math.floor(gx), fx = gx - c0;
        const v = state.image.smooth === 'nearest' ? at(Math.floor(y * o.rows / im.H), Math.floor(x * o.cols / im.W))
          : (1 - fy) * ((1 - fx) * at(r0, c0) + fx * at(r0, c0 + 1)) + fy * ((1 - fx) * at(r0 + 1, c0) + fx * at(r0 + 1, c0 + 1));
        const col = colorAt(v), p = 4 * (y * im.W + x), q = off + 3 * (y * im.W + x);
        for (let k = 0; k < 3; k++) {
          base.data[p + k] = PIXELS[q + k];
          mixed.data[p + k] = Math.round(a * col[k] + (1 - a) * PIXELS[q + k]);
        }
        base.data[p + 3] = mixed.data[p + 3] = 255;
      }
    }
    const scale = IMAGE_PX / Math.max(im.W, im.H);
    for (const [canvas, img] of [[picture, base], [blended, mixed]]) {
      canvas.width = im.W; canvas.height = im.H;
      canvas.style.width = Math.round(im.W * scale) + 'px'; canvas.style.height = Math.round(im.H * scale) + 'px';
      canvas.getContext('2d').putImageData(img, 0, 0);
    }
    // Nearest: the browser's enlargement of the canvas keeps the squares' edges sharp too.
    blended.style.imageRendering = state.image.smooth === 'nearest' ? 'pixelated' : '';
    const q = queryLabel(t);
    $('image-caption').textContent = 'query ' + t + (q !== null ? ' ' + q : '') + ' · ' +
      (state.image.head === 'mean' ? 'mean over heads' : headName(m, state.image.head)) +
      (m.layer_axis ? ' · layer ' + layerName(m, state.layer) : '') +
      ' · largest weight on a patch ' + short(o.most) + ' (the top of the scale)';
    blended.onmousemove = (e) => {
      const r = blended.getBoundingClientRect();
      const c = Math.floor((e.clientX - r.left) / r.width * o.cols), row = Math.floor((e.clientY - r.top) / r.height * o.rows);
      if (c < 0 || row < 0 || c >= o.cols || row >= o.rows) { tip(e, null); return; }
      tip(e, 'patch (' + row + ', ' + c + ') · key ' + (o.prefix + row * o.cols + c) + '\nweight ' +
        (o.values[row * o.cols + c] * o.most).toPrecision(6));
    };
    blended.onmouseleave = (e) => tip(e, null);
  }
  function setupImage() {
    $('image-query').addEventListener('change', () => { state.image.query = +$('image-query').value; drawImage(); });
    $('image-head').addEventListener('change', () => { const v = $('image-head').value; state.image.head = v === 'mean' ? 'mean' : +v; drawImage(); });
    $('image-alpha').addEventListener('input', () => { state.image.alpha = +$('image-alpha').value / 100; drawImage(); });
    $('image-smooth').addEventListener('change', () => { state.image.smooth = $('image-smooth').value; drawImage(); });
  }

  // ---- statistics and the run ----
  const STAT_COLUMNS = [['head', 'head'], ['entropy', 'entropy'], ['entropy_fraction', 'entropy / log S'],
    ['max_weight', 'max weight'], ['distance', 'distance'], ['diagonal', 'diagonal'],
    ['first_key', 'first key'], ['causal', 'causal']];
  function drawStats() {
    const m = M(), scope = $('stats-scope').value;
    // A map set without heads (rollout, flow) has one row: the map's own statistics.
    $('stats-title').textContent = m.head_axis ? 'Per-head statistics' : 'Statistics of the map (' + m.name + ')';
    const stats = scope === 'all' ? m.stats_all[state.layer] : m.stats[state.layer][state.batch];
    const rows = stats.heads.map((s, i) => Object.assign({ head: i }, s));
    const { key, dir } = state.sort;
    rows.sort((a, b) => {
      const x = a[key], y = b[key];
      if (x === y) return a.head - b.head;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    });
    const table = $('stats');
    table.textContent = '';
    const thead = document.createElement('thead'), tr = document.createElement('tr');
    for (const [k, label] of STAT_COLUMNS) {
      const th = document.createElement('th');
      th.textContent = label; th.dataset.key = k;
      if (k === key) th.setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
      th.addEventListener('click', () => { state.sort = { key: k, dir: k === key ? -dir : 1 }; drawStats(); });
      tr.append(th);
    }
    thead.append(tr); table.append(thead);
    const tbody = document.createElement('tbody');
    for (const r of rows) {
      const row = document.createElement('tr');
      row.dataset.head = r.head;
      for (const [k] of STAT_COLUMNS) {
        const td = document.createElement('td'), v = r[k];
        td.textContent = k === 'head' ? (m.head_axis ? headName(m, v).slice(5) : 'mean') : typeof v === 'number' ? v.toFixed(4) : v === null || v === undefined ? '—' : String(v);
        row.append(td);
      }
      row.addEventListener('click', () => openDetail(r.head));
      tbody.append(row);
    }
    table.append(tbody);
  }
  // ---- mha analyze's arrays: tables whose cells are coloured by value ----
  // byColumn: each column coloured on its own range (columns of different units).
  function heatTable(caption, rows, rowName, colNames, fmt, byColumn) {
    const flat = rows.flat().filter((v) => typeof v === 'number');
    const lo = Math.min(...flat), hi = Math.max(...flat);
    const column = (c) => rows.map((row) => row[c]).filter((v) => typeof v === 'number');
    const ranges = byColumn ? colNames.map((_, c) => [Math.min(...column(c)), Math.max(...column(c))]) : null;
    const table = document.createElement('table');
    table.className = 'heat';
    const cap = document.createElement('caption');
    cap.textContent = caption + (byColumn ? '  (each column coloured on its own range)' : flat.length ? '  (' + lo.toPrecision(4) + ' … ' + hi.toPrecision(4) + ')' : '');
    table.append(cap);
    const head = document.createElement('tr');
    head.append(document.createElement('th'));
    for (const c of colNames) { const th = document.createElement('th'); th.textContent = c; head.append(th); }
    table.append(head);
    rows.forEach((row, r) => {
      const tr = document.createElement('tr');
      const th = document.createElement('th');
      th.textContent = rowName(r);
      tr.append(th);
      row.forEach((v, c) => {
        const td = document.createElement('td');
        const cell = fmt(v, r, c);
        td.textContent = cell.text;
        td.title = cell.title;
        const [l, h] = ranges ? ranges[c] : [lo, hi];
        if (typeof cell.value === 'number' && h > l) {
          const rgb = VIRIDIS[Math.round(255 * (cell.value - l) / (h - l))];
          td.style.background = 'rgb(' + rgb.join(',') + ')';
          td.style.color = (cell.value - l) / (h - l) > 0.6 ? '#000' : '#fff';
        }
        tr.append(td);
      });
      table.append(tr);
    });
    return table;
  }
  function drawAnalyses() {
    const a = D.analyses;
    if (!a) return;
    $('analyses-section').hidden = false;
    const box = $('analyses');
    box.textContent = '';
    const tokens = (n) => Array.from({ length: n }, (_, i) => D.query_labels[i] !== undefined ? D.query_labels[i] : String(i));
    const num = (v) => typeof v === 'number' ? v.toFixed(3) : '—';
    if (a.loss && a.loss_labels) {  // an encoder-decoder's: each target token given what precedes it
      const names = Array.from({ length: a.loss.length }, (_, i) => a.loss_labels[i] !== undefined ? a.loss_labels[i] : String(i));
      box.append(heatTable('Loss of each target token (nats)', [a.loss], () => 'loss', names,
        (v, r, c) => ({ text: num(v), value: v, title: 'target token ' + c + ' ' + JSON.stringify(names[c]) + ': ' + num(v) + ' nats' })));
    } else if (a.loss) {
      box.append(heatTable('Loss of the next token (nats)', [a.loss], () => 'loss', tokens(a.loss.length),
        (v, r, c) => ({ text: num(v), value: v, title: 'after ' + JSON.stringify(tokens(a.loss.length)[c]) + ': ' + num(v) + ' nats' })));
    }
    if (a.logit_lens) {
      const n = a.logit_lens[0].length, S = a.logit_lens.length;
      const rows = a.logit_lens.map((state) => state.map((cell) => cell.p[0]));
      box.append(heatTable('Logit lens: each layer\'s most likely next token (colour: its probability)', rows,
        (s) => s === 0 ? 'embeddings' : s === S - 1 ? 'output' : 'layer ' + s, tokens(n),
        (v, s, t) => {
          const cell = a.logit_lens[s][t];
          return { text: cell.tokens[0], value: cell.p[0],
            title: cell.tokens.map((tok, i) => JSON.stringify(tok) + ' ' + num(cell.p[i])).join('\n') };
        }));
    }
    const grid = (key, caption, cols) => {
      if (!a[key]) return;
      box.append(heatTable(caption, a[key], (l) => 'layer ' + l, cols(a[key][0].length),
        (v, l, c) => ({ text: num(v), value: v, title: 'layer ' + l + ', ' + cols(a[key][0].length)[c] + ': ' + (typeof v === 'number' ? v.toPrecision(6) : '—') })));
    };
    const heads = (n) => Array.from({ length: n }, (_, i) => 'head ' + i);
    const metric = D.run && D.run.summary && D.run.summary.ablation ? ' (' + D.run.summary.ablation.metric + ')' : '';
    grid('ablation', 'Head ablation: the change in the metric' + metric, heads);
    grid('encoder_ablation', 'Head ablation, encoder self-attention: the change in the metric' + metric, heads);
    grid('decoder_ablation', 'Head ablation, decoder self-attention: the change in the metric' + metric, heads);
    grid('cross_ablation', 'Head ablation, cross-attention: the change in the metric' + metric, heads);
    grid('patch_heads', 'Activation patching, heads (0 = corrupt, 1 = clean)', heads);
    grid('patch_resid', 'Activation patching, residual stream by position', tokens);
    // Head detectors (head_scores.npy): a layers x heads grid per detector.
    if (a.head_scores) {
      a.head_scores.names.forEach((name, i) => {
        const rows = a.head_scores.grids[i], cols = heads(rows[0].length);
        box.append(heatTable('Head detector: ' + name + ' score', rows, (l) => 'layer ' + l, cols,
          (v, l, c) => ({ text: num(v), value: v, title: name + ', layer ' + l + ', ' + cols[c] + ': ' + (typeof v === 'number' ? v.toPrecision(6) : '—') })));
      });
    }
    // The corpus (corpus_heads.npy): a row per head, a column per statistic, as corpus_heads.csv.
    if (a.corpus) {
      const names = a.corpus.names, g = a.corpus.grids, L = g[0].length, H = g[0][0].length;
      const rows = [], label = [];
      for (let l = 0; l < L; ++l)
        for (let h = 0; h < H; ++h) { rows.push(names.map((_, s) => g[s][l][h])); label.push('layer ' + l + ', head ' + h); }
      const texts = D.run && D.run.summary && D.run.summary.corpus ? ' over ' + D.run.summary.corpus.texts + ' texts' : '';
      box.append(heatTable('Corpus statistics of each head' + texts, rows, (r) => label[r], names,
        (v, r, c) => ({ text: num(v), value: v, title: label[r] + ', ' + names[c] + ': ' + (typeof v === 'number' ? v.toPrecision(6) : '—') }), true));
    }
  }

  function drawRun() {
    const run = D.run;
    if (!run) { $('config').textContent = 'no run.json beside ' + D.maps[0].file; return; }
    const shown = run.mode === 'python' ? run : run.mode === 'model'
      ? { model: run.model, input: run.input, attention: run.attention, top_k: run.top_k, timings: run.timings, outputs: run.outputs }
      : run.mode === 'analyze'
        ? { model: run.model, methods: run.methods, input: run.input, summary: run.summary, arrays: run.arrays }
        : { config: run.config, timings_ms: run.timings_ms, threads: run.threads, blas: run.blas, outputs: run.outputs };
    $('config').textContent = JSON.stringify(shown, null, 2);
  }

  // ---- controls ----
  function fillSelect(sel, n, name) {
    sel.textContent = '';
    for (let i = 0; i < n; i++) { const o = document.createElement('option'); o.value = i; o.textContent = name(i); sel.append(o); }
  }
  function setupControls() {
    fillSelect($('map'), D.maps.length, (i) => D.maps[i].name);
    $('map-pick').hidden = D.maps.length < 2;
    const refill = () => {
      const m = M();
      fillSelect($('layer'), m.layers, (l) => layerName(m, l));
      $('layer-pick').hidden = !m.layer_axis;
      fillSelect($('batch'), m.B, (b) => String(fileRow(m, b)));
      fillSelect($('head'), m.h, (i) => headName(m, i));
      const all = document.createElement('option');
      all.value = ''; all.textContent = 'all (grid)';
      $('head').prepend(all);
      $('head').value = state.detail === null ? '' : state.detail;
      state.layer = Math.min(state.layer, m.layers - 1);
      state.batch = Math.min(state.batch, m.B - 1);
      $('layer').value = state.layer; $('batch').value = state.batch;
      if (!state.scaleChosen) state.scale = defaultScale(state.map);
      $('scale').value = state.scale;
    };
    refill();
    $('map').addEventListener('change', () => { state.map = +$('map').value; state.detail = null; $('detail-section').hidden = true; refill(); render(); });
    $('layer').addEventListener('change', () => { state.layer = +$('layer').value; render(); });
    // Another row: its own tokens in the selectors of the neuron view and the image.
    $('batch').addEventListener('change', () => { state.batch = +$('batch').value; state.neuron = null; state.image = null; render(); });
    $('head').addEventListener('change', () => { if ($('head').value === '') closeDetail(); else openDetail(+$('head').value); });
    $('scale').addEventListener('change', () => { state.scale = $('scale').value; state.scaleChosen = true; render(); });
    $('stats-scope').addEventListener('change', drawStats);
  }
  function render() {
    drawGrid();
    if (state.detail !== null) drawDetail();
    drawOverview();
    drawNeuron();
    drawImage();
    drawTokens();
    drawStats();
  }

  async function main() {
    $('title').textContent = 'mha view · ' + D.title;
    $('subtitle').textContent = (D.maps.length ? '' : 'analyses') + D.maps.map((m) => m.name + ' ' + (m.layer_axis && m.layers > 1 ? m.layers + ' layers × ' : '') +
      'B = ' + (m.B_file !== undefined ? m.B_file : m.B) + (m.B_file !== undefined && m.B < m.B_file ? ' (row ' + m.batch_rows.join(', ') + ' shown)' : '') + ', h = ' + m.h + ', T = ' + fileT(m) + ', S = ' + fileS(m) + ' (' + m.dtype + ')' +
      (m.factor > 1 ? ', shown as ' + m.T + ' × ' + m.S + ' blocks of ' + m.factor + ' × ' + m.factor + ' (max)' : '')).join(' · ') +
      ' · mha ' + D.version;
    if (!('DecompressionStream' in window)) throw new Error('this browser has no DecompressionStream; open the page in a current Chromium, Firefox or Safari');
    drawAnalyses();
    if (!D.maps.length) {  // an analyses-only page
      document.body.classList.add('analyses-only');
      for (const id of ['maps-section']) $(id).hidden = true;
      document.querySelector('.controls').hidden = true;
      $('stats').hidden = true;
      $('stats-scope').parentElement.hidden = true;
      if (D.run) $('config').textContent = JSON.stringify({ model: D.run.model, methods: D.run.methods, summary: D.run.summary }, null, 2);
    } else {
      W = await Promise.all(D.maps.map(unpack));
      if (D.images) PIXELS = await inflate(D.images.data);
      if (D.qk) {
        const [q, k] = await Promise.all(['q', 'k'].map((key) => unpack({ name: key, data: D.qk[key], dtype: 'float32',
          layers: D.qk.layers, B: D.qk.B, h: D.qk.h, T: D.qk.T, S: D.qk.d })));
        QK = { q, k };
      }
      CAUSAL = D.maps.map((m, mi) => isCausal(mi));
      setupControls();
      setupDetail();
      setupNeuron();
      setupImage();
      drawRun();
      render();
    }
    state.ready = true;
    document.body.dataset.readyMs = performance.now().toFixed(1);  // since navigation started
    document.body.dataset.ready = '1';
  }
  window.mhaView = { state, data: D, weights: () => W, causal: () => CAUSAL, exact, render, openDetail, neuron, overlay };
  main().catch((e) => {
    const el = $('error');
    el.hidden = false;
    el.textContent = 'The page could not be drawn: ' + e.message;
    console.error(e);
  });
})();
