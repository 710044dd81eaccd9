// A job's tasks drawn as a graph: layered left to right by dependency depth, coloured by
// state, redrawn in place while only states change.
import { h, s } from '../dom.js';
import { statementProgress } from '../format.js';
import { taskState } from '../meta.js';

// graphOrder sorts tasks by layer, then by id, so that lists read like the graph.
export function graphOrder(tasks) {
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

// layout puts each task in the layer after its deepest dependency and orders each layer.
function layout(tasks) {
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

export class TaskGraph {
  // body holds the SVG, legend the states present; onSelect(name) runs on a click on a task.
  constructor(body, legend, onSelect) {
    this.body = body;
    this.legend = legend;
    this.onSelect = onSelect;
    this.key = '';
    this.nodes = null;
    this.edges = [];
  }

  draw(tasks, selected) {
    this.tasks = tasks;
    this.selected = selected;
    const legendStates = [...new Set(tasks.map((t) => t.state))];
    this.legend.replaceChildren(...legendStates.map((st) => h('span', null, h('i', { class: 'st-' + st }), st)));
    const avail = Math.max(this.body.clientWidth - 16, 480);
    const key = avail + '|' + tasks.map((t) => t.id + ':' + (t.depends_on || []).join(',')).join(';');
    if (key === this.key && this.nodes) {
      for (const t of tasks) this.updateNode(this.nodes.get(t.name), t);
      this.updateEdges();
      return;
    }
    this.key = key;
    const compactMode = tasks.length > 200;
    const { layers } = layout(tasks);
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
    this.edges = [];
    for (const t of tasks) {
      for (const p of t.depends_on || []) {
        if (!at.has(p)) continue;
        const a = at.get(p), b = at.get(t.name);
        const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        const path = s('path', { class: 'edge', d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, 'marker-end': 'url(#arrow)' });
        edges.append(path);
        this.edges.push({ path, from: p, to: t.name });
      }
    }
    this.nodes = new Map();
    for (const t of tasks) {
      const { x, y } = at.get(t.name);
      const label = s('text', { x: 14, y: compactMode ? 19 : 21 });
      const meta = compactMode ? null : s('text', { class: 'meta', x: 14, y: 38 });
      const g = s('g', { class: 'node', transform: `translate(${x},${y})`, 'data-task': t.name, tabindex: 0, role: 'button',
        onclick: () => this.onSelect(t.name), onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); this.onSelect(t.name); } } },
      s('rect', { class: 'box', width: W, height: H, rx: 9 }),
      s('rect', { class: 'fill', x: 1, y: 1, width: W - 2, height: H - 2, rx: 8 }),
      s('rect', { class: 'stripe', x: 1, y: 1, width: 4, height: H - 2, rx: 2 }),
      label, meta, s('title'));
      nodes.append(g);
      const entry = { g, label, meta, W };
      this.nodes.set(t.name, entry);
      this.updateNode(entry, t);
    }
    this.body.replaceChildren(svg);
    this.updateEdges();
  }

  updateNode(entry, t) {
    const st = taskState(t.state);
    entry.g.setAttribute('class', `node st-${t.state}${st.pending ? ' pending' : ''}${st.active ? ' active' : ''}${this.selected === t.name ? ' selected' : ''}`);
    entry.g.setAttribute('data-state', t.state);
    const maxChars = Math.floor((entry.W - 22) / 7.2);
    entry.label.textContent = t.name.length > maxChars ? t.name.slice(0, maxChars - 1) + '…' : t.name;
    if (entry.meta) {
      const where = t.node || t.kind;
      const tries = t.runs > 1 || t.attempts > 1 ? ` · ${t.attempts}/${t.max_attempts}` : '';
      const pct = t.progress && t.progress.total > 0 ? ` · ${Math.min(100, Math.floor((100 * t.progress.done) / t.progress.total))}%` : '';
      entry.meta.replaceChildren(s('tspan', { class: 'state', text: t.state }), s('tspan', { text: ` · ${where}${tries}${pct}` }));
    }
    const err = t.last_error ? `\n${t.last_error.sqlstate ? t.last_error.sqlstate + ': ' : ''}${t.last_error.message}` : '';
    entry.g.querySelector('title').textContent = `${t.name} — ${t.state}\n${t.kind}${t.node ? ' on ' + t.node : ''} as ${t.owner}\nattempts ${t.attempts}/${t.max_attempts}${t.progress ? '\n' + statementProgress(t.progress) : ''}${err}`;
  }

  // updateEdges marks the edges out of tasks that succeeded, animating those into tasks
  // that run.
  updateEdges() {
    const state = new Map(this.tasks.map((t) => [t.name, taskState(t.state)]));
    for (const e of this.edges) {
      const from = state.get(e.from), to = state.get(e.to);
      const done = from && from.succeeded;
      const cls = done && to && to.active ? 'edge hot' : done ? 'edge done' : 'edge';
      e.path.setAttribute('class', cls);
    }
  }
}
