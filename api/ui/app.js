// deckhand dashboard: plain JavaScript, no build step, no dependencies.
//
// Views render from the JSON API. Live updates come from /api/events (server-sent events
// carrying job state changes); on top of that the view on screen re-reads its data at most
// once a second, and only while the tab is visible, for what no event announces (a task
// finishing inside a running job, worker heartbeats).
'use strict';

// ---------- small helpers ----------

const $ = (sel, root = document) => root.querySelector(sel);

// h builds an element; text is always set as text, never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function title(text) { return s('title', { text }); }

const nf = new Intl.NumberFormat();
function num(n) { return nf.format(n || 0); }
function compact(n) {
  if (n < 10000) return num(n);
  if (n < 1e6) return (n / 1000).toFixed(n < 1e5 ? 1 : 0).replace(/\.0$/, '') + 'k';
  return (n / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
}

function dur(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '—';
  if (ms < 0) ms = 0;
  if (ms < 1000) return Math.round(ms) + 'ms';
  const sec = ms / 1000;
  if (sec < 60) return (sec < 10 ? sec.toFixed(1) : Math.round(sec)) + 's';
  const m = Math.floor(sec / 60), r = Math.floor(sec % 60);
  if (m < 60) return m + 'm ' + String(r).padStart(2, '0') + 's';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
}

// The server's clock, so that durations of running things do not depend on this machine's.
let clockSkew = 0;
function now() { return Date.now() + clockSkew; }
function ts(v) { return v ? Date.parse(v) : null; }

function ago(v) {
  const t = ts(v);
  if (t === null) return '—';
  const d = now() - t;
  if (d < -1500) return 'in ' + dur(-d);
  if (d < 5000) return 'just now';
  return dur(d).split(' ')[0] + ' ago';
}

function timeCell(v) {
  return h('span', { title: v ? new Date(v).toLocaleString() : '', text: ago(v) });
}

function fmtTime(v) {
  return v ? new Date(v).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }) : '—';
}

function pill(state, big) {
  return h('span', { class: 'pill st-' + state + (big ? ' lg' : ''), text: state });
}

function bytes(n) {
  if (n === null || n === undefined) return '—';
  n = Number(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : Math.round(n)) + ' ' + u[i];
}

function toast(msg, isError) {
  const t = h('div', { class: 'toast' + (isError ? ' error' : ''), text: msg });
  $('#toasts').append(t);
  setTimeout(() => t.remove(), isError ? 7000 : 3500);
}

// ---------- API ----------

class APIError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path, opts = {}) {
  const res = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json', ...(opts.headers || {}) }, ...opts });
  if (res.status === 401) {
    // The session ended (signed out, or idle too long): the server shows its sign-in page.
    location.reload();
    throw new APIError(401, 'authentication required');
  }
  let body = null;
  try { body = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) throw new APIError(res.status, (body && body.error) || res.statusText);
  return body;
}

const JOB_STATES = ['running', 'scheduled', 'failing', 'cancelling', 'finished', 'failed', 'cancelled'];
const ACTIVE_JOB = new Set(['scheduled', 'running', 'failing', 'cancelling']);
const TERMINAL_TASK = new Set(['done', 'failed', 'unscheduled', 'cancelled']);

async function controlJob(id, action) {
  try {
    const r = await api(`/api/jobs/${id}/${action}`, { method: 'POST' });
    toast(`Job #${id} ${action === 'cancel' ? 'cancel requested' : 'retried'}: ${r.state}`);
    refreshSoon();
  } catch (e) {
    toast(e.message, true);
  }
}

function actionButtons(job, small) {
  const cls = small ? ' btn-sm' : '';
  const out = [];
  if (ACTIVE_JOB.has(job.state) && job.state !== 'cancelling') {
    out.push(h('button', {
      class: 'btn btn-danger' + cls, 'data-action': 'cancel', 'data-job': job.id, text: 'Cancel',
      onclick: (e) => { e.stopPropagation(); e.currentTarget.disabled = true; controlJob(job.id, 'cancel'); },
    }));
  }
  if (job.state === 'failed' || job.state === 'cancelled') {
    out.push(h('button', {
      class: 'btn' + cls, 'data-action': 'retry', 'data-job': job.id, text: 'Retry',
      onclick: (e) => { e.stopPropagation(); e.currentTarget.disabled = true; controlJob(job.id, 'retry'); },
    }));
  }
  return out;
}

function progressBar(j, big) {
  const total = Math.max(j.tasks_total, 1);
  const seg = (n, st) => n > 0 ? h('span', { class: 'st-' + st, 'data-w': (100 * n / total).toFixed(2) }) : null;
  const bar = h('div', { class: 'bar' + (big ? ' lg' : '') },
    seg(j.tasks_done, 'done'), seg(j.tasks_failed, 'failed'), seg(j.tasks_unscheduled, 'unscheduled'), seg(j.tasks_cancelled, 'cancelled'));
  // Widths through the CSSOM: the content security policy forbids style attributes.
  for (const sp of bar.children) sp.style.width = sp.dataset.w + '%';
  return h('div', { class: 'progress' }, bar, h('span', { class: 't', text: `${j.tasks_done}/${j.tasks_total}` }));
}

function jobDuration(j) {
  const start = ts(j.created_at);
  const end = j.finished_at ? ts(j.finished_at) : now();
  return dur(end - start) + (j.finished_at ? '' : '…');
}

// ---------- live updates ----------

const live = { source: null, on: false };
let view = null;
let refreshQueued = false;
let lastRefresh = 0;
let refreshing = false;

// refreshSoon re-reads the current view, at most once a second.
function refreshSoon() {
  if (refreshQueued) return;
  refreshQueued = true;
  const wait = Math.max(0, 1000 - (Date.now() - lastRefresh));
  setTimeout(runRefresh, wait);
}

async function runRefresh() {
  refreshQueued = false;
  if (refreshing) { refreshSoon(); return; }
  refreshing = true;
  lastRefresh = Date.now();
  try {
    await Promise.all([view && view.refresh ? view.refresh() : null, loadSummary()]);
  } catch (e) {
    if (e.status !== 401) console.warn('refresh failed', e);
  } finally {
    refreshing = false;
  }
}

function connectEvents() {
  const es = new EventSource('/api/events');
  live.source = es;
  const setLive = (on, label) => {
    live.on = on;
    const el = $('#live');
    el.className = 'live ' + (on ? 'on' : 'off');
    $('.label', el).textContent = label;
  };
  es.addEventListener('hello', () => { setLive(true, 'live'); refreshSoon(); });
  // A change names no job: re-read what is on screen, which shows only what this role may see.
  es.addEventListener('change', () => {
    summaryDirty = true;
    refreshSoon();
  });
  es.addEventListener('heartbeat', (e) => {
    const t = Date.parse(JSON.parse(e.data).time);
    if (!isNaN(t)) clockSkew = t - Date.now();
  });
  es.onerror = () => setLive(false, 'reconnecting');
}

// Views with something still moving ask to be re-read; this ticks once a second. The counts
// and the leader are re-read every two seconds: the server shares one reading among every
// dashboard, so this costs the catalog nothing more per open tab.
setInterval(() => {
  if (document.hidden) return;
  if (Date.now() - summaryAt >= 2000) {
    summaryDirty = true;
    loadSummary().catch(() => {});
  }
  if (!view || !view.poll) return;
  if (view.poll()) refreshSoon();
  if (view.tick) view.tick();
}, 1000);
document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshSoon(); });

// ---------- summary (counts, leader) ----------

let summary = null;
let summaryDirty = true;
let summaryAt = 0;

async function loadSummary() {
  if (!summaryDirty) return;
  summaryDirty = false;
  summaryAt = Date.now();
  summary = await api('/api/summary');
  const leader = $('#leader');
  if (summary.leader_id) {
    leader.textContent = `leader · worker #${summary.leader_id}`;
    leader.className = 'chip';
  } else {
    leader.textContent = 'no leader';
    leader.className = 'chip warn';
  }
  if (view && view.onSummary) view.onSummary(summary);
}

// ---------- router ----------

let meta = { pages: [] };

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '') || 'jobs';
  const [path, query] = raw.split('?');
  return { parts: path.split('/').filter(Boolean), params: new URLSearchParams(query || '') };
}

function renderNav(active) {
  const nav = $('#nav');
  nav.replaceChildren();
  const items = [['jobs', 'Jobs'], ...meta.pages.map((p) => ['p/' + p.name, p.title]), ['nodes', 'Nodes'], ['workers', 'Workers']];
  for (const [href, label] of items) {
    nav.append(h('a', { href: '#/' + href, class: active === href ? 'active' : '', text: label }));
  }
}

function route() {
  const { parts, params } = parseHash();
  if (view && view.unmount) view.unmount();
  const main = $('#main');
  main.replaceChildren();
  let key = parts[0];
  if (parts[0] === 'jobs' && parts[1]) view = new JobView(main, Number(parts[1]));
  else if (parts[0] === 'nodes') view = new NodesView(main);
  else if (parts[0] === 'workers') view = new WorkersView(main, params);
  else if (parts[0] === 'p' && parts[1]) {
    key = 'p/' + parts[1];
    const page = meta.pages.find((p) => p.name === parts[1]);
    view = page ? new PageView(main, page) : new JobsView(main, params);
  } else { key = 'jobs'; view = new JobsView(main, params); }
  renderNav(key);
  lastRefresh = 0;
  refreshQueued = false;
  summaryDirty = true;
  runRefresh();
}

// ---------- jobs list ----------

class JobsView {
  constructor(root, params) {
    this.state = params.get('state') || '';
    this.before = params.get('before') || '';
    this.jobs = [];
    this.cursors = (params.get('trail') || '').split(',').filter(Boolean);
    this.counts = h('div', { class: 'counts' });
    this.tbody = h('tbody');
    this.pager = h('div', { class: 'pager' });
    root.append(
      h('div', { class: 'page-head' },
        h('div', { class: 'grow' }, h('h1', { text: 'Jobs' }),
          h('div', { class: 'sub', text: 'DAGs of tasks run by the workers, newest first.' })),
        h('button', { class: 'btn btn-primary', id: 'new-job', text: 'New job', onclick: openSubmit })),
      this.counts,
      h('div', { class: 'card' },
        h('div', { class: 'table-wrap' }, h('table', { class: 'jobs' },
          h('thead', null, h('tr', null,
            h('th', { text: 'ID' }), h('th', { text: 'State' }), h('th', { text: 'Description' }),
            h('th', { text: 'Kind' }), h('th', { text: 'Progress' }), h('th', { text: 'Submitted by' }),
            h('th', { text: 'Created' }), h('th', { class: 'num', text: 'Duration' }), h('th', null))),
          this.tbody)),
        this.pager));
    if (summary) this.onSummary(summary);
  }

  link(state, before, trail) {
    const q = new URLSearchParams();
    if (state) q.set('state', state);
    if (before) q.set('before', before);
    if (trail && trail.length) q.set('trail', trail.join(','));
    const qs = q.toString();
    return '#/jobs' + (qs ? '?' + qs : '');
  }

  onSummary(sum) {
    let total = 0;
    for (const st of JOB_STATES) total += sum.jobs[st] || 0;
    const card = (st, label, n) => h('button', {
      class: 'count st-' + (st || 'all') + (this.state === st ? ' active' : ''), 'data-state': st || 'all',
      title: label + ': ' + num(n),
      onclick: () => { location.hash = this.link(this.state === st ? '' : st); },
    }, h('span', { class: 'n', text: compact(n) }), h('span', { class: 'l', text: label }));
    this.counts.replaceChildren(card('', 'all jobs', total), ...JOB_STATES.map((st) => card(st, st, sum.jobs[st] || 0)));
  }

  async refresh() {
    const q = new URLSearchParams({ limit: '50' });
    if (this.state) q.set('state', this.state);
    if (this.before) q.set('before', this.before);
    const res = await api('/api/jobs?' + q);
    const prev = new Map(this.jobs.map((j) => [j.id, j.state]));
    this.jobs = res.jobs;
    this.next = res.next_before;
    this.render(prev);
  }

  render(prev) {
    if (!this.jobs.length) {
      this.tbody.replaceChildren(h('tr', null, h('td', { colspan: 9, class: 'empty',
        text: this.state ? `No ${this.state} jobs.` : 'No jobs yet. Submit one with “New job” or deckhand job submit.' })));
    } else {
      this.tbody.replaceChildren(...this.jobs.map((j) => {
        const changed = prev.size && prev.get(j.id) !== j.state;
        return h('tr', { class: 'link' + (changed ? ' flash' : ''), 'data-job': j.id, 'data-state': j.state,
          onclick: () => { location.hash = '#/jobs/' + j.id; } },
        h('td', { class: 'id', text: '#' + j.id }),
        h('td', null, pill(j.state)),
        h('td', { class: 'desc', title: j.description, text: j.description || '—' }),
        h('td', { class: 'muted', text: j.kind }),
        h('td', null, progressBar(j)),
        h('td', { class: 'muted', text: j.submitted_by }),
        h('td', { class: 'nowrap muted' }, timeCell(j.created_at)),
        h('td', { class: 'num muted', text: jobDuration(j) }),
        h('td', { class: 'actions' }, actionButtons(j, true)));
      }));
    }
    const first = this.jobs[0], last = this.jobs[this.jobs.length - 1];
    const newer = this.cursors.length || this.before;
    this.pager.replaceChildren(
      h('span', { class: 'grow', text: this.jobs.length ? `Jobs #${first.id} to #${last.id}` : '' }),
      h('button', { class: 'btn btn-sm', disabled: !newer, text: '← Newer', onclick: () => {
        const trail = this.cursors.slice(0, -1);
        location.hash = this.link(this.state, this.cursors[this.cursors.length - 1] || '', trail);
      } }),
      h('button', { class: 'btn btn-sm', disabled: !this.next, text: 'Older →', onclick: () => {
        location.hash = this.link(this.state, this.next, [...this.cursors, this.before || '']);
      } }));
  }

  poll() { return this.jobs.some((j) => ACTIVE_JOB.has(j.state)); }
}

// ---------- submit dialog ----------

const EXAMPLE_SPEC = `{
  "description": "analyze after the nightly load",
  "tasks": [
    {"name": "load", "node": "NODE", "sql": "SELECT pg_sleep(2)"},
    {"name": "analyze", "node": "NODE", "sql": "ANALYZE", "depends_on": ["load"]}
  ]
}`;

async function openSubmit() {
  const dlg = $('#submit-dialog');
  const ta = $('#submit-spec');
  if (!ta.value) {
    let node = 'NODE';
    try {
      const { nodes } = await api('/api/nodes');
      if (nodes.length) node = nodes[0].name;
    } catch (e) { /* keep the placeholder */ }
    ta.value = EXAMPLE_SPEC.replaceAll('NODE', node);
  }
  $('#submit-error').hidden = true;
  dlg.showModal();
}

function setupSubmit() {
  $('#submit-cancel').addEventListener('click', () => $('#submit-dialog').close());
  $('#submit-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const err = $('#submit-error');
    const ok = $('#submit-ok');
    ok.disabled = true;
    try {
      const text = $('#submit-spec').value;
      const type = text.trim().startsWith('{') ? 'application/json' : 'application/yaml';
      const r = await api('/api/jobs', { method: 'POST', body: text, headers: { 'Content-Type': type } });
      $('#submit-dialog').close();
      toast(`Submitted job #${r.id}`);
      location.hash = '#/jobs/' + r.id;
    } catch (ex) {
      err.textContent = ex.message;
      err.hidden = false;
    } finally {
      ok.disabled = false;
    }
  });
}

// ---------- one job ----------

class JobView {
  constructor(root, id) {
    this.id = id;
    this.job = null;
    this.selected = null;
    this.dagKey = '';
    this.head = h('div');
    this.dagBody = h('div', { class: 'dag-wrap' });
    this.ganttBody = h('div', { class: 'gantt-wrap' });
    this.tasksBody = h('tbody');
    this.errorsCard = h('div', { class: 'card', hidden: true });
    this.legend = h('div', { class: 'legend' });
    root.append(
      this.head,
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Graph' }), this.legend),
        this.dagBody),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Timeline' }),
          h('div', { class: 'legend' }, ['done', 'retry', 'failed', 'lost', 'cancelled', 'running'].map((o) =>
            h('span', null, h('i', { class: 'st-' + o }), o)))),
        this.ganttBody),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { text: 'Tasks' })),
        h('div', { class: 'table-wrap' }, h('table', { class: 'tasks' },
          h('thead', null, h('tr', null, ['Task', 'State', 'Kind', 'Node', 'Owner', 'Attempts', 'Duration', 'Depends on', 'Last error']
            .map((t) => h('th', { class: t === 'Attempts' || t === 'Duration' ? 'num' : null, text: t })))),
          this.tasksBody))),
      this.errorsCard);
    this.resize = () => { if (this.job) { this.drawDAG(); this.drawGantt(); } };
    window.addEventListener('resize', this.resize);
  }

  unmount() { window.removeEventListener('resize', this.resize); }

  async refresh() {
    let d;
    try {
      d = await api('/api/jobs/' + this.id);
    } catch (e) {
      if (e.status === 404) {
        this.head.replaceChildren(h('div', { class: 'card empty', text: `Job #${this.id} does not exist (or was removed by retention).` }));
        this.job = null;
        return;
      }
      throw e;
    }
    clockSkew = ts(d.server_time) - Date.now();
    this.job = d;
    this.renderHead();
    this.drawDAG();
    this.drawGantt();
    this.renderTasks();
    this.renderErrors();
  }

  poll() { return this.job && ACTIVE_JOB.has(this.job.state); }
  tick() { if (this.job && ACTIVE_JOB.has(this.job.state)) this.renderFacts(); }

  renderHead() {
    const j = this.job;
    this.facts = h('div', { class: 'facts' });
    this.renderFacts();
    const byState = new Map();
    for (const t of j.tasks) byState.set(t.state, (byState.get(t.state) || 0) + 1);
    const order = ['done', 'running', 'cancelling', 'runnable', 'blocked', 'failed', 'unscheduled', 'cancelled'];
    const counts = order.filter((st) => byState.has(st)).map((st) => [st, byState.get(st)]);
    this.head.replaceChildren(h('div', { class: 'page-head' },
      h('div', { class: 'grow' },
        h('a', { class: 'crumb', href: '#/jobs', text: '← Jobs' }),
        h('div', { class: 'job-title' },
          h('h1', null, h('span', { class: 'id', text: '#' + j.id }), ' ', j.description || 'job ' + j.id),
          h('span', { id: 'job-state', 'data-state': j.state }, pill(j.state, true))),
        this.facts,
        h('div', { class: 'summary-bar' }, progressBar(j, true),
          h('div', { class: 'legend' }, counts.filter(([, n]) => n > 0).map(([st, n]) =>
            h('span', null, h('i', { class: 'st-' + st }), `${n} ${st}`))))),
      h('div', null, actionButtons(j, false))));
  }

  renderFacts() {
    const j = this.job;
    if (!this.facts) return;
    const started = j.started_at ? fmtTime(j.started_at) : 'not started';
    this.facts.replaceChildren(...[
      h('span', null, 'kind ', h('b', { text: j.kind })),
      h('span', null, 'submitted by ', h('b', { text: j.submitted_by })),
      h('span', null, 'created ', h('b', { text: fmtTime(j.created_at) })),
      h('span', null, 'started ', h('b', { text: started })),
      h('span', null, j.finished_at ? 'took ' : 'running for ', h('b', { text: jobDuration(j) })),
      j.cancel_requested_at ? h('span', null, 'cancel requested ', h('b', { text: fmtTime(j.cancel_requested_at) })) : null,
    ].filter(Boolean));
  }

  // ----- DAG: layered layout, left to right -----
  layout(tasks) {
    const byName = new Map(tasks.map((t) => [t.name, t]));
    const layer = new Map();
    const depth = (t, seen = new Set()) => {
      if (layer.has(t.name)) return layer.get(t.name);
      if (seen.has(t.name)) return 0; // a cycle cannot be submitted; never loop on bad data
      seen.add(t.name);
      let d = 0;
      for (const p of t.depends_on || []) if (byName.has(p)) d = Math.max(d, depth(byName.get(p), seen) + 1);
      layer.set(t.name, d);
      return d;
    };
    tasks.forEach((t) => depth(t));
    const layers = [];
    for (const t of tasks) (layers[layer.get(t.name)] ||= []).push(t.name);
    const children = new Map(tasks.map((t) => [t.name, []]));
    for (const t of tasks) for (const p of t.depends_on || []) if (children.has(p)) children.get(p).push(t.name);
    // Barycentre sweeps: order each layer by the mean position of its neighbours in the
    // layer before (downward) or after (upward), which untangles most crossings.
    const pos = new Map();
    const index = () => layers.forEach((l) => l.forEach((n, i) => pos.set(n, i)));
    index();
    const bary = (n, nbrs) => nbrs.length ? nbrs.reduce((a, m) => a + pos.get(m), 0) / nbrs.length : pos.get(n);
    for (let it = 0; it < 6; it++) {
      const down = it % 2 === 0;
      const order = down ? layers.slice(1) : layers.slice(0, -1).reverse();
      for (const l of order) {
        const key = new Map(l.map((n) => [n, bary(n, down ? (byName.get(n).depends_on || []).filter((p) => pos.has(p)) : children.get(n))]));
        l.sort((a, b) => key.get(a) - key.get(b));
        l.forEach((n, i) => pos.set(n, i));
      }
    }
    return { layers, children };
  }

  drawDAG() {
    const tasks = this.job.tasks;
    const legendStates = [...new Set(tasks.map((t) => t.state))];
    this.legend.replaceChildren(...legendStates.map((st) => h('span', null, h('i', { class: 'st-' + st }), st)));
    const avail = Math.max(this.dagBody.clientWidth - 16, 480);
    const key = avail + '|' + tasks.map((t) => t.id + ':' + (t.depends_on || []).join(',')).join(';');
    if (key === this.dagKey && this.dagNodes) {
      for (const t of tasks) this.updateNode(this.dagNodes.get(t.name), t);
      this.updateEdges();
      return;
    }
    this.dagKey = key;
    const compactMode = tasks.length > 200;
    const { layers } = this.layout(tasks);
    // A layer taller than a screen (an export's parts, say) wraps into several columns.
    const maxRows = Math.max(6, Math.ceil(Math.sqrt(tasks.length * 1.5)));
    const columns = []; // [layer index, names]
    layers.forEach((l, li) => { for (let i = 0; i < l.length; i += maxRows) columns.push([li, l.slice(i, i + maxRows)]); });
    // Fit the width when the graph is not too deep: narrower boxes and gaps, down to a
    // readable minimum, then scroll.
    const L = columns.length, PAD = 12, H = compactMode ? 30 : 50, GY = compactMode ? 10 : 18;
    let W = compactMode ? 120 : 188, GX = compactMode ? 48 : 72;
    if (L * W + (L - 1) * GX + 2 * PAD > avail) {
      GX = Math.max(36, Math.min(GX, Math.floor((avail - 2 * PAD) / L * 0.22)));
      W = Math.max(compactMode ? 90 : 128, Math.floor((avail - 2 * PAD - (L - 1) * GX) / L));
    }
    const tallest = Math.max(...columns.map(([, c]) => c.length));
    const height = tallest * (H + GY) - GY + 2 * PAD;
    const width = L * (W + GX) - GX + 2 * PAD;
    const at = new Map();
    columns.forEach(([, c], ci) => {
      const off = (height - 2 * PAD - (c.length * (H + GY) - GY)) / 2;
      c.forEach((n, i) => at.set(n, { x: PAD + ci * (W + GX), y: PAD + off + i * (H + GY) }));
    });
    const svg = s('svg', { class: 'dag', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'task graph' },
      s('defs', null, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { class: 'arrow', d: 'M 0 1 L 9 5 L 0 9 z' }))));
    const edges = s('g');
    const nodes = s('g');
    svg.append(edges, nodes);
    this.dagEdges = [];
    const byName = new Map(tasks.map((t) => [t.name, t]));
    for (const t of tasks) {
      for (const p of t.depends_on || []) {
        if (!at.has(p)) continue;
        const a = at.get(p), b = at.get(t.name);
        const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        const path = s('path', { class: 'edge', d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, 'marker-end': 'url(#arrow)' });
        edges.append(path);
        this.dagEdges.push({ path, from: p, to: t.name });
      }
    }
    this.dagNodes = new Map();
    for (const t of tasks) {
      const { x, y } = at.get(t.name);
      const label = s('text', { x: 14, y: compactMode ? 19 : 21 });
      const meta = compactMode ? null : s('text', { class: 'meta', x: 14, y: 38 });
      const g = s('g', { class: 'node', transform: `translate(${x},${y})`, 'data-task': t.name, tabindex: 0, role: 'button',
        onclick: () => this.select(t.name), onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); this.select(t.name); } } },
      s('rect', { class: 'box', width: W, height: H, rx: 9 }),
      s('rect', { class: 'fill', x: 1, y: 1, width: W - 2, height: H - 2, rx: 8 }),
      s('rect', { class: 'stripe', x: 1, y: 1, width: 4, height: H - 2, rx: 2 }),
      label, meta, s('title'));
      nodes.append(g);
      const entry = { g, label, meta, W };
      this.dagNodes.set(t.name, entry);
      this.updateNode(entry, t);
    }
    this.dagBody.replaceChildren(svg);
    this.updateEdges(byName);
  }

  updateNode(entry, t) {
    const pending = t.state === 'blocked' || t.state === 'runnable';
    const active = t.state === 'running' || t.state === 'cancelling';
    entry.g.setAttribute('class', `node st-${t.state}${pending ? ' pending' : ''}${active ? ' active' : ''}${this.selected === t.name ? ' selected' : ''}`);
    entry.g.setAttribute('data-state', t.state);
    const maxChars = Math.floor((entry.W - 22) / 7.2);
    entry.label.textContent = t.name.length > maxChars ? t.name.slice(0, maxChars - 1) + '…' : t.name;
    if (entry.meta) {
      const where = t.node || t.kind;
      const tries = t.runs > 1 || t.attempts > 1 ? ` · ${t.attempts}/${t.max_attempts}` : '';
      entry.meta.replaceChildren(s('tspan', { class: 'state', text: t.state }), s('tspan', { text: ` · ${where}${tries}` }));
    }
    const err = t.last_error ? `\n${t.last_error.sqlstate ? t.last_error.sqlstate + ': ' : ''}${t.last_error.message}` : '';
    entry.g.querySelector('title').textContent = `${t.name} — ${t.state}\n${t.kind}${t.node ? ' on ' + t.node : ''} as ${t.owner}\nattempts ${t.attempts}/${t.max_attempts}${err}`;
  }

  updateEdges() {
    const state = new Map(this.job.tasks.map((t) => [t.name, t.state]));
    for (const e of this.dagEdges || []) {
      const from = state.get(e.from), to = state.get(e.to);
      const cls = from === 'done' && (to === 'running' || to === 'cancelling') ? 'edge hot' : from === 'done' ? 'edge done' : 'edge';
      e.path.setAttribute('class', cls);
    }
  }

  select(name) {
    this.selected = this.selected === name ? null : name;
    this.drawDAG();
    this.renderTasks();
    if (this.selected) {
      const row = this.tasksBody.querySelector(`tr[data-task="${CSS.escape(name)}"]`);
      if (row) row.scrollIntoView({ block: 'center', behavior: 'smooth' });
    }
  }

  // ----- timeline -----
  drawGantt() {
    const j = this.job;
    const tasks = this.orderedTasks();
    const attempts = new Map(tasks.map((t) => [t.id, []]));
    for (const a of j.attempts) if (attempts.has(a.task_id)) attempts.get(a.task_id).push(a);
    const t0 = ts(j.created_at);
    let t1 = j.finished_at ? ts(j.finished_at) : now();
    for (const a of j.attempts) t1 = Math.max(t1, a.finished_at ? ts(a.finished_at) : now());
    for (const t of tasks) if (t.state === 'runnable' && t.not_before) t1 = Math.max(t1, ts(t.not_before));
    const span = Math.max((t1 - t0) * 1.02, 100);
    const LABEL = 200, ROW = 26, TOP = 26, RIGHT = 24;
    const width = Math.max(this.ganttBody.clientWidth || 900, 640);
    const plotW = width - LABEL - RIGHT;
    const x = (t) => LABEL + (t - t0) / span * plotW;
    const height = TOP + tasks.length * ROW + 8;
    const svg = s('svg', { class: 'gantt', width, height, viewBox: `0 0 ${width} ${height}` },
      s('defs', null, s('pattern', { id: 'stripes', width: 8, height: 8, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
        s('rect', { class: 'stripe-a', width: 8, height: 8 }),
        s('rect', { class: 'stripe-b', width: 4, height: 8 }))));
    // Ticks at a round step giving about eight of them.
    const steps = [10, 25, 50, 100, 250, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 144e5, 216e5, 432e5, 864e5];
    const step = steps.find((st) => span / st <= 8) || 864e5;
    for (let t = 0; t <= span; t += step) {
      svg.append(s('line', { class: 'gridline', x1: x(t0 + t), x2: x(t0 + t), y1: TOP - 6, y2: height }),
        s('text', { x: x(t0 + t), y: 14, 'text-anchor': 'middle', text: t === 0 ? '0' : '+' + dur(t) }));
    }
    tasks.forEach((t, i) => {
      const y = TOP + i * ROW;
      const row = s('g', { 'data-task': t.name },
        s('rect', { class: 'row-bg' + (i % 2 ? ' alt' : ''), x: 0, y, width, height: ROW }),
        s('circle', { class: 'dot st-' + t.state, cx: 10, cy: y + ROW / 2, r: 4 }),
        s('text', { class: 'label', x: 22, y: y + ROW / 2 + 4, text: t.name.length > 24 ? t.name.slice(0, 23) + '…' : t.name }, title(t.name + ' — ' + t.state)));
      for (const a of attempts.get(t.id)) {
        const st = ts(a.started_at);
        const en = a.finished_at ? ts(a.finished_at) : now();
        const running = !a.finished_at;
        const w = Math.max(x(en) - x(st), 3);
        const lines = [`${t.name} · attempt ${a.attempt} · ${running ? 'running' : a.outcome}`,
          `${fmtTime(a.started_at)} · ${dur(en - st)}${a.worker_id ? ' · worker #' + a.worker_id : ''}`];
        if (a.message) lines.push((a.sqlstate ? a.sqlstate + ': ' : '') + a.message);
        if (a.detail) lines.push('detail: ' + a.detail);
        if (a.hint) lines.push('hint: ' + a.hint);
        row.append(s('rect', { class: 'attempt st-' + (running ? 'running running' : a.outcome), 'data-outcome': running ? 'running' : a.outcome,
          x: x(st), y: y + 6, width: w, height: ROW - 12, rx: 3 }, title(lines.join('\n'))));
      }
      if (t.state === 'runnable' && t.not_before && ts(t.not_before) > now()) {
        const last = attempts.get(t.id).slice(-1)[0];
        const from = last && last.finished_at ? ts(last.finished_at) : now();
        row.append(s('rect', { class: 'backoff', x: x(from), y: y + 8, width: Math.max(x(ts(t.not_before)) - x(from), 2), height: ROW - 16, rx: 3 },
          title(`${t.name}: retry at ${fmtTime(t.not_before)}`)));
      }
      svg.append(row);
    });
    if (!j.finished_at) {
      const nx = x(now());
      svg.append(s('line', { class: 'now', x1: nx, x2: nx, y1: TOP - 6, y2: height }));
    }
    this.ganttBody.replaceChildren(svg);
  }

  // Tasks in graph order: by layer, then by id, so the timeline reads like the graph.
  orderedTasks() {
    const tasks = this.job.tasks;
    const byName = new Map(tasks.map((t) => [t.name, t]));
    const memo = new Map();
    const depth = (t) => {
      if (memo.has(t.name)) return memo.get(t.name);
      memo.set(t.name, 0);
      let d = 0;
      for (const p of t.depends_on || []) if (byName.has(p)) d = Math.max(d, depth(byName.get(p)) + 1);
      memo.set(t.name, d);
      return d;
    };
    return [...tasks].sort((a, b) => depth(a) - depth(b) || a.id - b.id);
  }

  renderTasks() {
    const rows = [];
    for (const t of this.orderedTasks()) {
      const st = ts(t.started_at);
      const en = t.finished_at ? ts(t.finished_at) : (t.state === 'running' || t.state === 'cancelling') ? now() : null;
      const err = t.last_error ? (t.last_error.sqlstate ? t.last_error.sqlstate + ': ' : '') + t.last_error.message : '';
      const open = this.selected === t.name;
      rows.push(h('tr', { class: 'link' + (open ? ' selected' : ''), 'data-task': t.name, 'data-state': t.state,
        onclick: () => this.select(t.name) },
      h('td', { class: 'nowrap' }, h('b', { text: t.name })),
      h('td', null, pill(t.state)),
      h('td', { class: 'muted', text: t.kind }),
      h('td', { class: 'muted', text: t.node || '—' }),
      h('td', { class: 'muted', text: t.owner }),
      h('td', { class: 'num', text: `${t.attempts}/${t.max_attempts}` }),
      h('td', { class: 'num muted', text: st && en ? dur(en - st) : '—' }),
      h('td', { class: 'muted', text: (t.depends_on || []).join(', ') || '—' }),
      h('td', { class: 'err', title: err, text: err })));
      if (open) {
        rows.push(h('tr', { class: 'detail' }, h('td', { colspan: 9 },
          t.sql ? h('pre', { class: 'sql', text: t.sql }) : null,
          h('dl', { class: 'kv' },
            h('dt', { text: 'transaction' }), h('dd', { text: t.transaction ? 'yes' : 'no (runs outside a transaction block)' }),
            h('dt', { text: 'timeout' }), h('dd', { text: dur(t.timeout_ms) }),
            h('dt', { text: 'runs' }), h('dd', { text: `${t.runs} (attempts charged ${t.attempts} of ${t.max_attempts})` }),
            t.worker_id ? [h('dt', { text: 'worker' }), h('dd', { text: '#' + t.worker_id })] : null,
            t.not_before && t.state === 'runnable' ? [h('dt', { text: 'next attempt' }), h('dd', { text: fmtTime(t.not_before) })] : null))));
      }
    }
    this.tasksBody.replaceChildren(...rows);
  }

  renderErrors() {
    const errs = this.job.attempts.filter((a) => a.message);
    this.errorsCard.hidden = !errs.length;
    if (!errs.length) return;
    this.errorsCard.replaceChildren(
      h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Errors' }), h('span', { class: 'muted', text: `${errs.length} attempt${errs.length > 1 ? 's' : ''}` })),
      h('div', { class: 'error-list' }, errs.slice().reverse().map((a) => h('div', { class: 'error-item' },
        h('div', { class: 'who' }, a.task, ' ', pill(a.outcome), h('span', { class: 'muted', text: `attempt ${a.attempt} · ${fmtTime(a.finished_at || a.started_at)}` })),
        h('div', null,
          h('div', { class: 'msg' }, a.sqlstate ? h('span', { class: 'code', text: a.sqlstate }) : null, a.message),
          a.detail ? h('div', { class: 'extra', text: 'Detail: ' + a.detail }) : null,
          a.hint ? h('div', { class: 'extra', text: 'Hint: ' + a.hint }) : null)))));
  }
}

// ---------- nodes ----------

class NodesView {
  constructor(root) {
    this.tbody = h('tbody');
    root.append(
      h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', { text: 'Nodes' }),
        h('div', { class: 'sub', text: 'Target PostgreSQL servers. Passwords are never stored: workers take them from their environment.' }))),
      h('div', { class: 'card' }, h('div', { class: 'table-wrap' }, h('table', null,
        h('thead', null, h('tr', null, ['Node', 'Group', 'Role', 'Load', 'Conninfo', 'Position', 'Checked', 'Last error'].map((t) => h('th', { text: t })))),
        this.tbody))));
  }

  async refresh() {
    const { nodes } = await api('/api/nodes');
    if (!nodes.length) {
      this.tbody.replaceChildren(h('tr', null, h('td', { colspan: 8, class: 'empty', text: 'No nodes. Add one with deckhand node add.' })));
      return;
    }
    this.tbody.replaceChildren(...nodes.map((n) => {
      const bar = h('div', { class: 'bar' }, h('span', { class: n.running_tasks >= n.max_tasks ? 'st-cancelling' : 'st-running' }));
      bar.firstChild.style.width = Math.min(100, 100 * n.running_tasks / n.max_tasks) + '%';
      return h('tr', { 'data-node': n.name },
        h('td', { class: 'nowrap' }, h('b', { text: n.name })),
        h('td', { class: 'nowrap muted', text: n.group }),
        h('td', null, pill(n.role)),
        h('td', null, h('div', { class: 'progress' }, bar, h('span', { class: 't', text: `${n.running_tasks}/${n.max_tasks}` }))),
        h('td', { class: 'mono muted', text: n.dsn }),
        h('td', { class: 'mono muted', text: n.replay_lsn || '—' }),
        h('td', { class: 'nowrap muted' }, timeCell(n.checked_at)),
        h('td', { class: 'err', title: n.last_error || '', text: n.last_error || '' }));
    }));
  }

  poll() { return true; }
}

// ---------- workers ----------

class WorkersView {
  constructor(root, params) {
    this.stopped = params.get('stopped') === '1';
    this.tbody = h('tbody');
    this.leaderCard = h('div', { class: 'counts' });
    root.append(
      h('div', { class: 'page-head' },
        h('div', { class: 'grow' }, h('h1', { text: 'Workers' }),
          h('div', { class: 'sub' }, h('code', { text: 'deckhand serve' }), ' processes. One at a time leads: it rescues the tasks of workers that died and applies retention.')),
        h('label', { class: 'toggle' }, h('input', { type: 'checkbox', checked: this.stopped, onchange: (e) => {
          location.hash = e.target.checked ? '#/workers?stopped=1' : '#/workers';
        } }), 'show stopped')),
      this.leaderCard,
      h('div', { class: 'card' }, h('div', { class: 'table-wrap' }, h('table', null,
        h('thead', null, h('tr', null, ['ID', 'Name', 'Status', 'Running', 'Started', 'Heartbeat', 'Lease'].map((t) => h('th', { text: t })))),
        this.tbody))));
  }

  async refresh() {
    const res = await api('/api/workers' + (this.stopped ? '?stopped=1' : ''));
    const alive = res.workers.filter((w) => w.alive);
    const running = alive.reduce((a, w) => a + w.running_tasks, 0);
    const slots = alive.reduce((a, w) => a + w.concurrency, 0);
    const card = (cls, n, l) => h('div', { class: 'count ' + cls }, h('span', { class: 'n', text: n }), h('span', { class: 'l', text: l }));
    this.leaderCard.replaceChildren(
      card('st-alive', num(alive.length), 'workers alive'),
      card(res.leader_id ? 'st-running' : 'st-cancelling', res.leader_id ? '#' + res.leader_id : 'none', 'leader'),
      card('st-running', num(running), 'tasks running'),
      card('st-blocked', num(slots), 'task slots'));
    if (!res.workers.length) {
      this.tbody.replaceChildren(h('tr', null, h('td', { colspan: 7, class: 'empty', text: 'No workers. Start one with deckhand serve.' })));
      return;
    }
    this.tbody.replaceChildren(...res.workers.map((w) => {
      const status = w.stopped_at ? 'stopped' : w.alive ? 'alive' : 'expired';
      const bar = h('div', { class: 'bar' }, h('span', { class: 'st-running' }));
      bar.firstChild.style.width = Math.min(100, 100 * w.running_tasks / Math.max(w.concurrency, 1)) + '%';
      return h('tr', { 'data-worker': w.id },
        h('td', { class: 'id', text: '#' + w.id }),
        h('td', null, h('b', { text: w.name }), w.is_leader ? h('span', { class: 'chip inline', text: '★ leader' }) : null),
        h('td', null, pill(status)),
        h('td', null, h('div', { class: 'progress' }, bar, h('span', { class: 't', text: `${w.running_tasks}/${w.concurrency}` }))),
        h('td', { class: 'nowrap muted' }, timeCell(w.started_at)),
        h('td', { class: 'nowrap muted' }, timeCell(w.heartbeat_at)),
        h('td', { class: 'nowrap muted' }, w.stopped_at ? h('span', null, 'stopped ', timeCell(w.stopped_at)) : h('span', { text: 'expires ' + ago(w.lease_expires_at) })));
    }));
  }

  poll() { return true; }
}

// ---------- pages registered by the server (exports, cleanup, ...) ----------

class PageView {
  constructor(root, page) {
    this.page = page;
    this.tbody = h('tbody');
    root.append(
      h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', { text: page.title }),
        page.description ? h('div', { class: 'sub', text: page.description }) : null)),
      h('div', { class: 'card' }, h('div', { class: 'table-wrap' }, h('table', null,
        h('thead', null, h('tr', null, page.columns.map((c) => h('th', { class: ['number', 'bytes', 'bytes_per_s', 'duration_ms'].includes(c.format) ? 'num' : null, text: c.title })))),
        this.tbody))));
  }

  cell(c, item) {
    const v = item[c.key];
    switch (c.format) {
      case 'state': return h('td', null, v ? pill(v) : '—');
      case 'job': return h('td', { class: 'id' }, v ? h('a', { href: '#/jobs/' + v, text: '#' + v }) : '—');
      case 'time': return h('td', { class: 'nowrap muted' }, timeCell(v));
      case 'duration_ms': return h('td', { class: 'num muted', text: dur(v) });
      case 'bytes': return h('td', { class: 'num', text: bytes(v) });
      case 'bytes_per_s': return h('td', { class: 'num muted', text: v ? bytes(v) + '/s' : '—' });
      case 'error': return h('td', { class: 'err', title: v || '', text: v || '' });
      case 'number': return h('td', { class: 'num', text: v === null || v === undefined ? '—' : num(v) });
      case 'progress': {
        const total = item[c.total] || 0;
        const bar = h('div', { class: 'bar' }, h('span', { class: 'st-done' }));
        bar.firstChild.style.width = (total ? Math.min(100, 100 * (v || 0) / total) : 0) + '%';
        return h('td', null, h('div', { class: 'progress' }, bar, h('span', { class: 't', text: `${v || 0}/${total}` })));
      }
      default: return h('td', { class: 'text', title: v === null || v === undefined ? '' : String(v), text: v === null || v === undefined ? '—' : String(v) });
    }
  }

  async refresh() {
    const { items } = await api('/api/' + this.page.name);
    const list = items || [];
    if (!list.length) {
      this.tbody.replaceChildren(h('tr', null, h('td', { colspan: this.page.columns.length, class: 'empty', text: 'Nothing here.' })));
      return;
    }
    this.tbody.replaceChildren(...list.map((item) => h('tr', null, this.page.columns.map((c) => this.cell(c, item)))));
  }

  poll() { return true; }
}

// ---------- start ----------

function setupTheme() {
  const root = document.documentElement;
  const stored = localStorage.getItem('deckhand-theme');
  root.dataset.theme = stored || (matchMedia('(prefers-color-scheme: light)').matches ? 'light' : 'dark');
  $('#theme').addEventListener('click', () => {
    root.dataset.theme = root.dataset.theme === 'light' ? 'dark' : 'light';
    localStorage.setItem('deckhand-theme', root.dataset.theme);
    if (view instanceof JobView && view.job) view.drawGantt();
  });
}

async function start() {
  setupTheme();
  setupSubmit();
  try { meta = await api('/api/meta'); } catch (e) { /* keep defaults */ }
  $('#user').textContent = meta.user || '';
  window.addEventListener('hashchange', route);
  route();
  connectEvents();
}

start();
