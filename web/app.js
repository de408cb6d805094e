// Cohort dashboard: polls GET /v1/dashboard and draws nodes, GPUs, the queue, running
// and recent jobs; shows a job's loss curve and log; submits and cancels jobs through
// the head's /v1 API.
//
// Everything from the server (names, commands, reasons, logs) reaches the DOM through
// textContent, Text nodes or attribute properties, never as HTML. No libraries, no
// network beyond this origin (the page's Content-Security-Policy enforces both).
'use strict';

(() => {
  const POLL_MS = 2000;
  const DASH = '—';
  const LOG_TAIL_BYTES = 64 * 1024;
  // A request the head has not answered in this long is given up and retried at the next
  // poll: one lost response must not freeze the page.
  const FETCH_TIMEOUT_MS = 15000;
  const LOG_KEEP_CHARS = 256 * 1024;
  const CONFIRM_MS = 5000;

  const state = {
    data: null,        // the last /v1/dashboard reply
    selected: null,    // job id shown in the detail panel
    detail: null,      // {id, job, loss}: the selected job in full and its loss curve
    confirm: new Map(),  // job id -> deadline of a pending "confirm cancel"
    log: null,         // {job, rank, attempt, offset, decoder}
    timer: null,
  };
  // For tests and curious users: how many polls succeeded, and the last error.
  const hooks = window.cohortDashboard = { polls: 0, lastError: null };

  const $ = (id) => document.getElementById(id);

  // el('td', {class: 'x', text: 'y', title: 'z', dataset: {job: 1}}, child, 'text', ...)
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else if (k === 'width') e.style.width = v;  // CSSOM, which the page's CSP allows
        else e[k] = v;
      }
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c);  // strings become Text nodes
    }
    return e;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // ---- formatting ----
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  function fmtNum(v, digits = 3) {
    if (!isNum(v)) return DASH;
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (Number.isInteger(v)) return v.toLocaleString('en-US');
    return v.toPrecision(digits > 0 ? Math.max(digits, String(Math.trunc(a)).length) : 3);
  }
  function fmtRate(v) {
    if (!isNum(v)) return DASH;
    if (v >= 1e9) return (v / 1e9).toFixed(2) + ' G';
    if (v >= 1e6) return (v / 1e6).toFixed(2) + ' M';
    if (v >= 1e3) return (v / 1e3).toFixed(1) + ' k';
    return v.toFixed(1);
  }
  // Durations and times exactly as the CLI writes them (common/clock.h FormatDuration,
  // FormatTimestamp): "450ms", "3.2s", "1m05s", "1h02m", "2d03h"; "2026-11-21T09:14:57Z".
  function fmtDuration(ms) {
    if (!isNum(ms) || ms < 0) return DASH;
    ms = Math.floor(ms);
    if (ms < 1000) return ms + 'ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + 's';
    let s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
    return Math.floor(s / 86400) + 'd' + String(Math.floor((s % 86400) / 3600)).padStart(2, '0') + 'h';
  }
  // Percent, rate and ETA as the CLI's PROGRESS column (api::FormatProgressEta).
  function fmtProgress(e) {
    if (!e) return DASH;
    let out = isNum(e.percent) ? Math.floor(e.percent) + '%' : 'step ' + e.step;
    if (isNum(e.steps_per_s)) {
      const r = e.steps_per_s;
      out += ' ' + (r >= 10 ? r.toFixed(0) : r >= 0.1 ? r.toFixed(1) : r.toFixed(3)) + '/s';
    }
    if (isNum(e.eta_s)) out += ' ETA ' + fmtDuration(e.eta_s * 1000);
    return out;
  }
  function progressCell(j) {
    const e = j.progress_eta;
    const td = el('td', { class: 'progress', text: fmtProgress(e) });
    if (e && isNum(e.percent)) {
      const bar = el('div', { class: 'bar' }, el('div', { class: 'fill', width: Math.min(100, e.percent).toFixed(1) + '%' }));
      td.prepend(bar);
    }
    return td;
  }
  function fmtGiB(bytes) {
    if (!isNum(bytes)) return DASH;
    const g = bytes / 1073741824;
    return (g >= 100 ? g.toFixed(0) : g.toFixed(1));
  }
  function fmtTime(ms) {
    if (!isNum(ms) || ms <= 0) return DASH;
    return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
  }
  function hostList(job) {
    const nodes = (job.allocation && job.allocation.nodes) || [];
    if (nodes.length === 0) return DASH;
    const names = nodes.map((n) => n.node);
    return names.length <= 3 ? names.join(',') : names.slice(0, 2).join(',') + ',… (' + names.length + ')';
  }
  function shellJoin(argv) {
    if (!Array.isArray(argv)) return DASH;
    return argv.map((a) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : "'" + String(a).replace(/'/g, "'\\''") + "'")).join(' ');
  }
  // What a job runs: an allocation (`cohort alloc`) has no command of its own.
  function jobCommand(s) {
    return s.kind === 'allocation' ? '(allocation)' : shellJoin(s.command);
  }
  // An allocation's steps (`cohort run` inside it): each with its command and, once every
  // task has ended, the highest exit code, as `cohort show` lists them.
  function stepsText(job) {
    const steps = job.steps || [];
    if (!steps.length) return DASH;
    return steps.map((st) => {
      const codes = (st.tasks || []).map((t) => t.exit_code);
      const ended = codes.length > 0 && codes.every(isNum);
      return `#${st.id} ${shellJoin(st.command)}: ${ended ? 'exit ' + Math.max(...codes) : 'running'}`;
    }).join(' · ');
  }
  // Units of a GPU a placed sharing task holds (gpu_share: 4 a GPU), as the scheduler gave
  // them: a gpu_memory-only task holds its memory's part of its GPU, rounded up to a quarter.
  const SHARE_UNITS = 4;
  function isSharing(s) { return (isNum(s.gpus_per_task) && s.gpus_per_task < 1) || !!s.gpu_memory; }
  // A job's GPUs; a sharing job's parts count as their fraction (two tasks of ½: 1), from
  // its placed tasks (the head keeps them in a sharing job's allocation), else its spec.
  function jobGpus(job) {
    const s = job.spec || {};
    if (isSharing(s)) {
      let units = 0;
      for (const na of (job.allocation && job.allocation.nodes) || []) {
        for (const t of na.tasks || []) units += isNum(t.gpu_share) ? t.gpu_share : 0;
      }
      if (units > 0) return units / SHARE_UNITS;
      if (isNum(s.gpus_per_task) && s.gpus_per_task < 1) return (s.nodes || 0) * (s.tasks_per_node || 1) * s.gpus_per_task;
      return s.gpu_memory + ' GPU memory';  // its part is known once placed
    }
    return (s.nodes || 0) * (s.gpus_per_node || 0);
  }
  // What a job asks of GPUs, per node or per task: "h100:4/node", "0.5 GPU/task",
  // "20GiB GPU memory/task".
  function gpuAsk(s) {
    const type = s.gpu_type ? ' ' + s.gpu_type : '';
    if (isNum(s.gpus_per_task) && s.gpus_per_task < 1) {
      return `${s.gpus_per_task}${type} GPU${s.gpu_memory ? ' (' + s.gpu_memory + ')' : ''}/task`;
    }
    if (s.gpu_memory) return `${s.gpu_memory}${type} GPU memory/task`;
    return `${s.gpus_per_node || 0}${type} GPU/node`;
  }
  function badge(text) { return el('span', { class: 'state ' + text, text }); }

  // ---- the token ----
  // Asked for once (when the head answers 401) and kept in a cookie of this origin for 30
  // days; sent as "Authorization: Bearer ..." (the head reads no cookies).
  const TOKEN_COOKIE = 'cohort_token';
  function token() {
    const m = document.cookie.match(/(?:^|; )cohort_token=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : '';
  }
  function authHeaders() {
    const t = token();
    return t ? { Authorization: 'Bearer ' + t } : {};
  }
  function askForToken(message) {
    const form = $('login');
    form.hidden = false;
    $('login-message').textContent = message;
  }
  function saveToken(ev) {
    ev.preventDefault();
    const t = $('login-token').value.trim();
    if (!t) return;
    // Secure over HTTPS (the default): never sent over a plain connection.
    const secure = location.protocol === 'https:' ? '; Secure' : '';
    document.cookie = `${TOKEN_COOKIE}=${encodeURIComponent(t)}; path=/; max-age=${30 * 24 * 3600}; SameSite=Strict${secure}`;
    $('login').hidden = true;
    $('login-token').value = '';
    poll();
  }

  // ---- HTTP ----
  // fetch() that fails with a clear message once FETCH_TIMEOUT_MS pass without an answer.
  async function fetchWithin(path, opts) {
    try {
      return await fetch(path, { ...opts, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    } catch (e) {
      if (e && e.name === 'TimeoutError') throw new Error(`no answer in ${FETCH_TIMEOUT_MS / 1000} s`);
      throw e;
    }
  }

  async function api(method, path, body) {
    const opts = { method, cache: 'no-store', headers: authHeaders() };
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    const res = await fetchWithin(path, opts);
    if (res.status === 401) askForToken('The head asks for a token: ' + ((await res.clone().json().catch(() => ({}))).error?.message || 'HTTP 401'));
    const text = await res.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
    if (!res.ok) {
      const msg = json && json.error && json.error.message ? json.error.message : 'HTTP ' + res.status;
      throw new Error(msg);
    }
    return json;
  }

  // ---- loss curves ----
  // Points [[step, loss], ...] → an SVG path inside (x0, y0, w, h); returns the ranges.
  function lossPath(points, x0, y0, w, h) {
    let minS = Infinity, maxS = -Infinity, minL = Infinity, maxL = -Infinity;
    for (const [s, l] of points) {
      minS = Math.min(minS, s); maxS = Math.max(maxS, s);
      minL = Math.min(minL, l); maxL = Math.max(maxL, l);
    }
    const sx = maxS > minS ? w / (maxS - minS) : 0;
    const sy = maxL > minL ? h / (maxL - minL) : 0;
    let d = '';
    points.forEach(([s, l], i) => {
      const x = x0 + (sx ? (s - minS) * sx : w / 2);
      const y = y0 + (sy ? h - (l - minL) * sy : h / 2);
      d += (i ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
    });
    return { d, minS, maxS, minL, maxL };
  }

  function sparkline(job) {
    const pts = job.loss && job.loss.points;
    if (!pts || pts.length === 0) return document.createTextNode(DASH);
    const w = 120, h = 26;
    const s = svg('svg', { class: 'spark', width: w, height: h, viewBox: `0 0 ${w} ${h}` });
    s.append(svg('path', { class: 'line', d: lossPath(pts, 1, 2, w - 2, h - 4).d }));
    return s;
  }

  // The loss curve (and the validation loss, when reported) against steps, with axis
  // titles and the ranges at the ends of each axis.
  function lossChart(job) {
    const pts = (job.loss && job.loss.points) || [];
    const val = (job.loss && job.loss.val) || [];
    if (pts.length === 0 && val.length === 0) return el('p', { class: 'muted', text: 'No loss reported yet (tasks post it to $COHORT_REPORT).' });
    const w = 520, h = 236, left = 64, bottom = 34, top = 8, right = 10;
    const s = svg('svg', { class: 'chart-svg', width: '100%', viewBox: `0 0 ${w} ${h}`, role: 'img' });
    // One scale for both series.
    const all = pts.concat(val);
    const r = lossPath(all, left, top, w - left - right, h - top - bottom);
    const scaled = (series) => {
      if (series.length === 0) return '';
      const sx = r.maxS > r.minS ? (w - left - right) / (r.maxS - r.minS) : 0;
      const sy = r.maxL > r.minL ? (h - top - bottom) / (r.maxL - r.minL) : 0;
      return series.map(([st, l], i) => {
        const x = left + (sx ? (st - r.minS) * sx : (w - left - right) / 2);
        const y = top + (sy ? (h - top - bottom) - (l - r.minL) * sy : (h - top - bottom) / 2);
        return (i ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
      }).join('');
    };
    s.append(svg('line', { class: 'axis', x1: left, y1: top, x2: left, y2: h - bottom }));
    s.append(svg('line', { class: 'axis', x1: left, y1: h - bottom, x2: w - right, y2: h - bottom }));
    const label = (x, y, text, anchor, cls) => {
      const t = svg('text', { x, y, 'text-anchor': anchor, class: cls || '' });
      t.textContent = text;
      s.append(t);
      return t;
    };
    label(left - 4, top + 8, fmtNum(r.maxL, 4), 'end');
    label(left - 4, h - bottom, fmtNum(r.minL, 4), 'end');
    label(left, h - bottom + 14, fmtNum(r.minS), 'start');
    label(w - right, h - bottom + 14, fmtNum(r.maxS), 'end');
    label(left + (w - left - right) / 2, h - 4, 'step', 'middle', 'axis-title');
    label(12, top + (h - top - bottom) / 2, 'loss', 'middle', 'axis-title')
      .setAttribute('transform', `rotate(-90 12 ${top + (h - top - bottom) / 2})`);
    if (pts.length) s.append(svg('path', { class: 'line', d: scaled(pts) }));
    if (val.length) s.append(svg('path', { class: 'line val', d: scaled(val) }));
    const parts = [];
    if (pts.length) parts.push(`loss of rank ${job.loss.rank} (${job.loss.total} points, ${pts.length} drawn)`);
    if (val.length) parts.push(`val loss (${val.length} points, dashed)`);
    const title = el('div', { class: 'muted', text: parts.join(' · ') });
    return el('div', null, title, s);
  }

  // ---- cancel ----
  function cancelButton(job) {
    const id = job.id;
    const deadline = state.confirm.get(id);
    const confirming = deadline && deadline > Date.now();
    const b = el('button', {
      type: 'button',
      class: 'cancel' + (confirming ? ' confirm' : ''),
      text: confirming ? 'Confirm cancel' : 'Cancel',
      title: confirming ? 'Click again to cancel job ' + id : 'Cancel job ' + id,
      dataset: { cancel: String(id) },
    });
    b.addEventListener('click', async (ev) => {
      ev.stopPropagation();
      const d = state.confirm.get(id);
      if (!(d && d > Date.now())) {
        state.confirm.set(id, Date.now() + CONFIRM_MS);
        render();
        setTimeout(render, CONFIRM_MS + 50);
        return;
      }
      state.confirm.delete(id);
      b.disabled = true;
      b.textContent = 'Cancelling…';
      try {
        await api('POST', `/v1/jobs/${id}/cancel`);
        setStatus(`Job ${id} cancelled`, false);
      } catch (e) {
        setStatus(`Cannot cancel job ${id}: ${e.message}`, true);
      }
      poll();
    });
    return b;
  }

  // ---- rendering ----
  function setStatus(text, isError) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('error', !!isError);
  }

  function renderSummary(d) {
    const s = d.summary || {};
    const item = (label, value) => el('span', null, label + ' ', el('b', { text: String(value) }));
    const parts = [
      item('nodes', `${s.nodes_up ?? DASH}/${s.nodes ?? DASH} up`),
      item('GPUs', `${s.gpus_allocated ?? DASH}/${s.gpus ?? DASH} allocated`),
      item('running', s.running ?? DASH),
      item('pending', s.pending ?? DASH),
    ];
    if (s.unhealthy_gpus) parts.push(item('unhealthy GPUs', s.unhealthy_gpus));
    $('summary').replaceChildren(...parts);
  }

  // node name -> gpu index -> the jobs holding it: [{job, share, memory, warning}], from
  // the running jobs' allocations. `share` is the job's part of the GPU (1 for whole GPUs;
  // for a sharing job its tasks' slices of that GPU added up, two quarter tasks: 0.5; null
  // when not known), `memory` its tasks' GPU memory on that GPU where their agents
  // reported it (tasks_usage), `warning` the first task's over-share warning.
  function gpuOwners(d) {
    const owners = new Map();
    for (const j of d.running || []) {
      const s = j.spec || {};
      const sharing = isSharing(s);
      const share = !sharing ? 1 : null;
      const holder = (node, g) => {
        if (!owners.has(node)) owners.set(node, new Map());
        const m = owners.get(node);
        if (!m.has(g)) m.set(g, []);
        let h = m.get(g).find((x) => x.job === j.id);
        if (!h) m.get(g).push(h = { job: j.id, share, memory: null, warning: '', gpuMemory: s.gpu_memory || '' });
        return h;
      };
      for (const na of (j.allocation && j.allocation.nodes) || []) {
        for (const g of na.gpus || []) holder(na.node, g);
        if (!sharing) continue;
        for (const t of na.tasks || []) {
          if (!isNum(t.gpu_share) || !(t.gpus || []).length) continue;
          const h = holder(na.node, t.gpus[0]);
          h.share = (h.share || 0) + t.gpu_share / SHARE_UNITS;
        }
      }
      if (sharing && isNum(s.gpus_per_task) && s.gpus_per_task < 1) {
        for (const m of owners.values()) {
          for (const hs of m.values()) for (const h of hs) if (h.job === j.id && h.share === null) h.share = s.gpus_per_task;
        }
      }
      for (const u of j.tasks_usage || []) {
        const gpus = Array.isArray(u.gpus) ? u.gpus : [];
        for (const g of gpus) {
          const h = holder(u.node, g);
          // A task on several GPUs: its memory is their sum; shown once, on its first GPU.
          if (isNum(u.gpu_memory_bytes) && g === gpus[0]) h.memory = (h.memory || 0) + u.gpu_memory_bytes;
          if (u.gpu_memory_warning && !h.warning) h.warning = u.gpu_memory_warning;
        }
      }
    }
    return owners;
  }

  function shareText(h) {
    if (h.share === 1 && !h.gpuMemory) return '';
    const part = h.share === null ? '' : ' ' + ({ 0.25: '¼', 0.5: '½', 0.75: '¾', 1: '1' }[h.share] || String(h.share));
    // A gpu_memory-only part: the memory it asked for after the part it holds.
    return part + (h.gpuMemory ? ' ' + h.gpuMemory : '');
  }

  function gpuCell(g, holders) {
    holders = holders || [];
    const t = g.telemetry && typeof g.telemetry === 'object' ? g.telemetry : null;
    const unhealthy = g.healthy === false;
    const warned = holders.some((h) => h.warning);
    const cls = 'gpu' + (holders.length ? ' busy' : '') + (holders.some((h) => h.share !== 1) ? ' shared' : '') +
      (unhealthy ? ' unhealthy' : '') + (warned ? ' over' : '');
    const util = t && isNum(t.utilization) ? Math.max(0, Math.min(1, t.utilization)) : null;
    const memTotal = t && isNum(t.memory_total_bytes) && t.memory_total_bytes > 0 ? t.memory_total_bytes
      : (isNum(g.memory_bytes) && g.memory_bytes > 0 ? g.memory_bytes : null);
    const memUsed = t && isNum(t.memory_used_bytes) ? t.memory_used_bytes : null;
    const memFrac = memUsed !== null && memTotal ? Math.max(0, Math.min(1, memUsed / memTotal)) : null;
    const bar = (cls2, frac) => el('div', { class: 'bar ' + cls2 }, el('i', { width: `${frac === null ? 0 : (frac * 100).toFixed(0)}%` }));
    const tip = [
      `GPU ${g.index}: ${g.name || 'unknown'}${g.simulated ? ' (simulated)' : ''}`,
      g.mig_profile ? `MIG instance ${g.mig_profile} of GPU ${g.mig_parent}` : null,
      g.uuid ? `uuid ${g.uuid}` : null,
      holders.length ? holders.map((h) => `job ${h.job}${shareText(h)}` +
        (h.memory === null ? '' : ` · GPU memory ${fmtGiB(h.memory)} GiB`) + (h.warning ? ` · ${h.warning}` : '')).join('\n') : 'free',
      `utilization ${util === null ? DASH : Math.round(util * 100) + '%'}`,
      `memory ${memUsed === null ? DASH : fmtGiB(memUsed)} / ${memTotal === null ? DASH : fmtGiB(memTotal)} GiB`,
      `temperature ${t && isNum(t.temperature_celsius) ? t.temperature_celsius + ' °C' : DASH}`,
      `power ${t && isNum(t.power_watts) ? Math.round(t.power_watts) + ' W' : DASH}`,
      `SM clock ${t && isNum(t.sm_clock_hz) ? Math.round(t.sm_clock_hz / 1e6) + ' MHz' : DASH}`,
      g.healthy === undefined ? 'health ' + DASH : (unhealthy ? 'UNHEALTHY: ' + (g.health_reason || 'no reason given') : 'healthy'),
    ].filter(Boolean).join('\n');
    const owner = (h) => el('div', { class: 'holder' + (h.warning ? ' over' : ''), dataset: { job: String(h.job) } },
      'j' + h.job + shareText(h), !(h.memory > 0) ? null : el('span', { class: 'gmem', text: ' ' + fmtGiB(h.memory) + 'G' }),
      h.warning ? el('span', { class: 'health', text: ' ⚠' }) : null);
    return el('div', { class: cls, title: tip, dataset: { gpu: String(g.index) } },
      el('div', null, el('span', { class: 'idx', text: '#' + g.index }), ' ',
        g.mig_profile ? el('span', { class: 'mig-profile', text: g.mig_profile }) : null,
        holders.length ? null : el('span', { class: 'muted', text: ' free' })),
      ...holders.map(owner),
      el('div', { text: 'util ' + (util === null ? DASH : Math.round(util * 100) + '%') }),
      bar('util', util),
      el('div', { text: 'mem ' + (memUsed === null ? DASH : fmtGiB(memUsed)) + '/' + (memTotal === null ? DASH : fmtGiB(memTotal)) }),
      bar('mem', memFrac),
      el('div', null, t && isNum(t.temperature_celsius) ? Math.round(t.temperature_celsius) + '°C' : DASH + '°C',
        unhealthy ? el('span', { class: 'health', text: ' ✕ ' + (g.health_reason || 'unhealthy') }) : null));
  }

  // A node's mean GPU utilization over time ([[time_ms, ratio], ...], oldest first) with
  // its axes labelled: 0-100% up the side, the time span along the bottom.
  function utilChart(history, now) {
    if (!Array.isArray(history) || history.length === 0) return null;
    const w = 240, h = 64, left = 30, bottom = 14, top = 4, right = 4;
    const s = svg('svg', { class: 'util', width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: 'img' });
    const t0 = history[0][0], t1 = Math.max(history[history.length - 1][0], t0 + 1);
    const x = (t) => left + (history.length > 1 ? (t - t0) / (t1 - t0) * (w - left - right) : (w - left - right));
    const y = (u) => top + (1 - u) * (h - top - bottom);
    s.append(svg('line', { class: 'axis', x1: left, y1: top, x2: left, y2: h - bottom }));
    s.append(svg('line', { class: 'axis', x1: left, y1: h - bottom, x2: w - right, y2: h - bottom }));
    const label = (lx, ly, text, anchor) => {
      const t = svg('text', { x: lx, y: ly, 'text-anchor': anchor });
      t.textContent = text;
      s.append(t);
    };
    label(left - 3, top + 7, '100%', 'end');
    label(left - 3, h - bottom, '0%', 'end');
    label(left, h - 2, fmtDuration(now - t0) + ' ago', 'start');
    label(w - right, h - 2, 'GPU util · now', 'end');
    const d = history.map(([t, u], i) => (i ? 'L' : 'M') + x(t).toFixed(1) + ' ' + y(u).toFixed(1)).join('');
    s.append(svg('path', { class: 'line', d: history.length > 1 ? d : d + 'L' + (left).toFixed(1) + ' ' + y(history[0][1]).toFixed(1) }));
    return s;
  }

  // The kept samples (one per 10 s) end at the latest readings: the line reaches "now".
  function withLiveUtil(history, gpus, now) {
    const known = gpus.map((g) => g.telemetry && g.telemetry.utilization).filter(isNum);
    if (!Array.isArray(history) || history.length === 0 || known.length === 0) return history;
    const last = history[history.length - 1];
    if (now <= last[0]) return history;
    return history.concat([[now, known.reduce((a, b) => a + b, 0) / known.length]]);
  }

  // Whole GPUs as cells; MIG instances grouped under their parent GPU, where it stood.
  function gpuCells(gpus, own) {
    const out = [];
    const parents = new Map();
    for (const g of gpus) {
      if (!(isNum(g.mig_parent) && g.mig_parent >= 0)) {
        out.push(gpuCell(g, own.get(g.index)));
        continue;
      }
      if (!parents.has(g.mig_parent)) {
        const box = el('div', { class: 'mig', dataset: { migParent: String(g.mig_parent) } },
          el('div', { class: 'mig-head', text: `GPU ${g.mig_parent} · MIG` }));
        parents.set(g.mig_parent, box);
        out.push(box);
      }
      parents.get(g.mig_parent).append(gpuCell(g, own.get(g.index)));
    }
    return out;
  }

  function renderNodes(d) {
    const owners = gpuOwners(d);
    const nodes = d.nodes || [];
    $('nodes-count').textContent = `(${nodes.length})`;
    if (nodes.length === 0) {
      $('nodes').replaceChildren(el('p', { class: 'muted', text: 'No nodes yet: start an agent with `cohort agent --head <url>`.' }));
      return;
    }
    const cards = nodes.map((n) => {
      const st = n.display_state || n.state || DASH;
      const gpus = Array.isArray(n.gpus) ? n.gpus : [];
      const hb = isNum(n.heartbeat_age_ms) && n.heartbeat_age_ms >= 0 ? fmtDuration(n.heartbeat_age_ms) + ' ago' : 'never';
      const reason = n.drain ? (n.drain_reason || 'drained') : (st === 'DOWN' ? n.reason : '');
      const head = el('div', { class: 'node-head' },
        el('span', { class: 'name', text: n.name }), badge(st),
        isNum(n.unhealthy_gpus) && n.unhealthy_gpus > 0 ? el('span', { class: 'health', text: `${n.unhealthy_gpus} unhealthy` }) : null,
        el('span', { class: 'meta', text: `GPUs ${n.gpus_allocated ?? DASH}/${gpus.length} · CPUs ${n.cpus_allocated ?? DASH}/${n.cpus ?? DASH} · ♥ ${hb}` }));
      const own = owners.get(n.name) || new Map();
      return el('div', { class: 'node ' + st, dataset: { node: n.name } }, head,
        reason ? el('div', { class: 'muted', text: reason }) : null,
        gpus.length ? el('div', { class: 'gpus' }, ...gpuCells(gpus, own)) : el('div', { class: 'muted', text: 'no GPUs' }),
        utilChart(withLiveUtil(n.gpu_util_history, gpus, d.time_ms || Date.now()), d.time_ms || Date.now()));
    });
    $('nodes').replaceChildren(...cards);
  }

  function jobRow(job, cells) {
    // The id links to the job's own URL (#job/ID), which opens its detail when loaded.
    cells[0] = el('td', null, el('a', { class: 'job-link', href: '#job/' + job.id, text: String(job.id) }));
    const tr = el('tr', { dataset: { job: String(job.id) } }, ...cells.map((c) => (c instanceof Node && c.tagName === 'TD') ? c : el('td', null, c)));
    if (state.selected === job.id) tr.classList.add('selected');
    tr.addEventListener('click', () => select(job.id));
    return tr;
  }

  function fillTable(id, rows, cols, emptyText) {
    const body = $(id).tBodies[0];
    if (rows.length === 0) body.replaceChildren(el('tr', null, el('td', { class: 'empty', colSpan: cols, text: emptyText })));
    else body.replaceChildren(...rows);
  }

  function renderJobs(d) {
    const now = d.time_ms || Date.now();
    const running = d.running || [];
    $('running-count').textContent = `(${running.length})`;
    fillTable('running', running.map((j) => {
      const p = j.progress || {};
      return jobRow(j, [
        String(j.id), el('td', { class: 'name', text: j.spec.name, title: jobCommand(j.spec) }), j.spec.user,
        hostList(j), String(jobGpus(j)), fmtDuration(now - j.start_ms),
        isNum(p.step) ? fmtNum(p.step) : DASH, fmtNum(p.loss, 4), fmtRate(p.tokens_per_s),
        progressCell(j), sparkline(j), cancelButton(j),
      ]);
    }), 12, 'No running jobs.');

    const queue = d.queue || [];
    const total = d.summary && isNum(d.summary.pending) ? d.summary.pending : queue.length;
    $('queue-count').textContent = queue.length < total ? `(${queue.length} of ${total})` : `(${total})`;
    fillTable('queue', queue.map((j) => {
      const s = j.spec;
      const asks = `${s.nodes}×${s.tasks_per_node} tasks, ${gpuAsk(s)}`;
      return jobRow(j, [
        String(j.id), el('td', { class: 'name', text: s.name, title: jobCommand(s) }), s.user, String(s.priority),
        asks, fmtDuration(now - j.submit_ms), el('td', { class: 'reason', text: j.reason || DASH }), cancelButton(j),
      ]);
    }), 8, 'The queue is empty.');

    fillTable('recent', (d.recent || []).map((j) => jobRow(j, [
      String(j.id), el('td', { class: 'name', text: j.spec.name, title: jobCommand(j.spec) }), j.spec.user,
      badge(j.state), j.start_ms ? fmtDuration(j.end_ms - j.start_ms) : DASH,
      j.end_ms ? fmtDuration(now - j.end_ms) + ' ago' : DASH,
      j.exit_code === null || j.exit_code === undefined ? DASH : String(j.exit_code),
      el('td', { class: 'reason', text: j.reason || DASH }),
    ])), 8, 'No finished jobs yet.');
  }

  // Inference services (GET /v1/services): one row per replica, with its load as the
  // gateway last read it.
  function fmtMs(s) { return isNum(s) && s > 0 ? fmtNum(s * 1000, 3) + ' ms' : DASH; }
  function renderServices(list) {
    const rows = [];
    for (const s of list || []) {
      for (const r of s.replica_status || []) {
        const kv = r.kv_blocks_total ? Math.round(100 * r.kv_blocks_used / r.kv_blocks_total) + '%' : DASH;
        rows.push(el('tr', null, ...[
          s.name, s.model_name, String(r.job), badge(r.state), r.node || DASH, r.site || DASH,
          el('td', { class: 'reason', text: r.healthy ? 'ok' : (r.health || DASH) }),
          r.state === 'RUNNING' ? `${r.running}+${r.waiting}` : DASH, kv, fmtRate(r.tokens_per_second),
          `${fmtMs(r.ttft_p50_seconds)} / ${fmtMs(r.ttft_p99_seconds)}`,
          `${fmtMs(r.itl_p50_seconds)} / ${fmtMs(r.itl_p99_seconds)}`,
        ].map((c) => (c instanceof Node ? (c.tagName === 'TD' ? c : el('td', null, c)) : el('td', { text: c })))));
      }
    }
    const healthy = (list || []).reduce((n, s) => n + s.healthy, 0);
    const replicas = (list || []).reduce((n, s) => n + s.replicas, 0);
    $('services-count').textContent = `(${(list || []).length}; ${healthy} of ${replicas} replicas healthy)`;
    fillTable('services', rows, 12, 'No services (cohort serve deploy).');
  }

  function findJob(id) {
    if (state.detail && state.detail.id === id && state.detail.job) return state.detail.job;
    const d = state.data || {};
    for (const list of [d.running, d.queue, d.recent]) {
      for (const j of list || []) if (j.id === id) return j;
    }
    return null;
  }

  function renderDetail() {
    const sec = $('detail-section');
    if (state.selected === null) { sec.hidden = true; return; }
    sec.hidden = false;
    const job = findJob(state.selected);
    $('detail-title').textContent = String(state.selected) + (job ? ' · ' + job.spec.name : '');
    if (!job) { $('detail-facts').replaceChildren(el('dd', { text: 'loading…' })); return; }
    const s = job.spec, p = job.progress || {};
    const now = (state.data && state.data.time_ms) || Date.now();
    const facts = [
      ['state', badge(job.state)],
      ['reason', job.reason || DASH],
      ['user', s.user],
      ['command', jobCommand(s)],
      ...(s.kind === 'allocation' ? [['steps', stepsText(job)]] : []),
      ['shape', `${s.nodes} node(s) × ${s.tasks_per_node} task(s), ${gpuAsk(s)}, priority ${s.priority}`],
      ['nodes', hostList(job)],
      ['attempt', String(job.attempt)],
      ['submitted', fmtTime(job.submit_ms)],
      ['running for', job.state === 'RUNNING' ? fmtDuration(now - job.start_ms) : DASH],
      ['exit code', job.exit_code === null || job.exit_code === undefined ? DASH : String(job.exit_code)],
      ['step', isNum(p.step) ? fmtNum(p.step) + (isNum(p.total_steps) ? ' of ' + fmtNum(p.total_steps) : '') : DASH],
      ['progress', fmtProgress(job.progress_eta)],
      ['loss', fmtNum(p.loss, 5)],
      ['val loss', fmtNum(p.val_loss, 5)],
      ['tokens/s', fmtRate(p.tokens_per_s)],
      ['samples/s', fmtRate(p.samples_per_s)],
      ['GPU time', isNum(job.gpu_seconds) ? fmtDuration(job.gpu_seconds * 1000) : DASH],
    ];
    $('detail-facts').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', null, v)]));
    const curve = state.detail && state.detail.id === job.id && state.detail.loss ? { ...job, loss: state.detail.loss } : job;
    $('detail-chart').replaceChildren(lossChart(curve));
    const ranks = Math.max(1, Math.min(256, (s.nodes || 1) * (s.tasks_per_node || 1)));
    const sel = $('log-rank');
    if (sel.options.length !== ranks) {
      const keep = sel.value;
      sel.replaceChildren(...Array.from({ length: ranks }, (_, i) => el('option', { value: String(i), text: String(i) })));
      sel.value = keep && Number(keep) < ranks ? keep : '0';
    }
  }

  function render() {
    if (!state.data) return;
    renderSummary(state.data);
    renderNodes(state.data);
    renderJobs(state.data);
    renderServices(state.services);
    renderDetail();
  }

  // ---- the selected job: its full record and a finer loss curve ----
  const CHART_POINTS = 400;
  async function pollDetail() {
    const id = state.selected;
    if (id === null) return;
    try {
      const job = await api('GET', `/v1/jobs/${id}`);
      let loss = null;
      if (job.start_ms > 0) {
        const prog = await api('GET', `/v1/jobs/${id}/progress?limit=10000`);
        const pts = (prog.points || []).filter((p) => isNum(p.loss));
        if (pts.length) {
          const rank = Math.min(...pts.map((p) => p.rank));
          const mine = pts.filter((p) => p.rank === rank);
          // Runs of consecutive points, each drawn as its mean at its last step.
          const n = mine.length, m = Math.min(n, CHART_POINTS), out = [];
          for (let b = 0; b < m; b++) {
            const lo = Math.floor(b * n / m), hi = Math.floor((b + 1) * n / m);
            let sum = 0;
            for (let i = lo; i < hi; i++) sum += mine[i].loss;
            out.push([mine[hi - 1].step, sum / (hi - lo)]);
          }
          out[out.length - 1] = [mine[n - 1].step, mine[n - 1].loss];
          loss = { rank, total: n, points: out };
        }
        const val = (prog.points || []).filter((p) => isNum(p.val_loss));
        if (val.length) {
          if (!loss) loss = { rank: val[0].rank, total: 0, points: [] };
          loss.val = val.slice(-CHART_POINTS).map((p) => [p.step, p.val_loss]);
        }
      }
      if (state.selected === id) state.detail = { id, job, loss };
    } catch (e) {
      if (state.selected === id) $('log-status').textContent = e.message;
    }
  }

  // ---- logs ----
  async function pollLog() {
    if (state.selected === null) return;
    const job = findJob(state.selected);
    if (!job) return;
    const out = $('log');
    if (job.state === 'PENDING' || !(job.start_ms > 0)) {
      out.textContent = '';
      $('log-status').textContent = 'not started yet';
      state.log = null;
      return;
    }
    const rank = Number($('log-rank').value || 0);
    const attempt = job.attempt;
    let L = state.log;
    if (!L || L.job !== job.id || L.rank !== rank || L.attempt !== attempt) {
      L = state.log = { job: job.id, rank, attempt, offset: null, decoder: new TextDecoder(), done: false };
      out.textContent = '';
    }
    if (L.done) return;
    const base = `/v1/jobs/${job.id}/logs?rank=${rank}&attempt=${attempt}`;
    try {
      if (L.offset === null) {
        // Learn the size, then show only the tail.
        const head = await fetchWithin(base + '&offset=0&limit=1', { cache: 'no-store', headers: authHeaders() });
        if (!head.ok) throw new Error((await head.json().catch(() => ({}))).error?.message || 'HTTP ' + head.status);
        const size = Number(head.headers.get('X-Cohort-Size') || 0);
        L.offset = Math.max(0, size - LOG_TAIL_BYTES);
        if (L.offset > 0) out.textContent = `… (${L.offset} earlier bytes not shown)\n`;
      }
      const res = await fetchWithin(`${base}&offset=${L.offset}&limit=${LOG_TAIL_BYTES}`, { cache: 'no-store', headers: authHeaders() });
      if (state.log !== L) return;  // the selection changed while we waited
      if (!res.ok) throw new Error((await res.json().catch(() => ({}))).error?.message || 'HTTP ' + res.status);
      const bytes = new Uint8Array(await res.arrayBuffer());
      L.offset = Number(res.headers.get('X-Cohort-Next-Offset') || L.offset + bytes.length);
      L.done = res.headers.get('X-Cohort-Done') === '1';
      if (bytes.length) {
        const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 20;
        let text = out.textContent + L.decoder.decode(bytes, { stream: !L.done });
        if (text.length > LOG_KEEP_CHARS) text = text.slice(text.length - LOG_KEEP_CHARS);
        out.textContent = text;
        if (atBottom) out.scrollTop = out.scrollHeight;
      }
      $('log-status').textContent = `${L.offset} bytes · attempt ${attempt}` + (L.done ? ' · ended' : ' · following');
    } catch (e) {
      $('log-status').textContent = e.message;
    }
  }

  async function select(id) {
    if (location.hash !== '#job/' + id) history.replaceState(null, '', '#job/' + id);
    state.selected = id;
    state.detail = null;
    state.log = null;
    $('log').textContent = '';
    $('log-status').textContent = '';
    render();
    await pollDetail();
    render();
    pollLog();
    $('detail-section').scrollIntoView({ block: 'nearest' });
  }

  // ---- submit ----
  function defaultName(command) {
    const first = (command.trim().split(/\s+/)[0] || '').split('/').pop();
    const name = first.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 128);
    return name || 'job';
  }

  async function submit(ev) {
    ev.preventDefault();
    const f = ev.target;
    const out = $('submit-result');
    const command = f.command.value;
    const spec = {
      command: ['/bin/sh', '-c', command],
      name: f.name.value.trim() || defaultName(command),
      nodes: Number(f.nodes.value),
      tasks_per_node: Number(f.tasks_per_node.value),
      gpus_per_node: Number(f.gpus_per_node.value),
    };
    out.className = 'muted';
    out.textContent = 'submitting…';
    try {
      const job = await api('POST', '/v1/jobs', spec);
      out.className = 'ok';
      out.textContent = `Submitted job ${job.id} (${job.state})`;
      poll();
      select(job.id);
    } catch (e) {
      out.className = 'error';
      out.textContent = e.message;
    }
  }

  // ---- polling ----
  async function poll() {
    clearTimeout(state.timer);
    try {
      state.data = await api('GET', '/v1/dashboard?recent=20&points=32');
      state.services = (await api('GET', '/v1/services')).services;
      hooks.polls++;
      hooks.lastError = null;
      await pollDetail();
      render();
      setStatus('updated ' + fmtTime(Date.now()), false);
      await pollLog();
    } catch (e) {
      hooks.lastError = e.message;
      setStatus('cannot reach the head: ' + e.message + ' (retrying)', true);
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('submit').addEventListener('submit', submit);
    $('login').addEventListener('submit', saveToken);
    $('detail-close').addEventListener('click', () => {
      state.selected = null; state.detail = null; state.log = null;
      history.replaceState(null, '', location.pathname + location.search);
      render();
    });
    const fromHash = () => {
      const m = /^#job\/(\d+)$/.exec(location.hash);
      if (m && Number(m[1]) !== state.selected) select(Number(m[1]));
    };
    window.addEventListener('hashchange', fromHash);
    fromHash();
    $('log-rank').addEventListener('change', () => { state.log = null; pollLog(); });
    poll();
  });
})();
