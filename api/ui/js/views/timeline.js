// A job's timeline: one row per task in graph order, one bar per attempt (the running one
// growing), dashed where a task waits out its backoff.
import { s, svgTitle } from '../dom.js';
import { dur, fmtTime, now, ts } from '../format.js';
import { taskState } from '../meta.js';

// The outcomes of attempts, for the legend; an attempt still running shows as "running".
export const OUTCOMES = ['done', 'retry', 'failed', 'lost', 'cancelled', 'running'];

// Tick steps (ms), the first that gives about eight ticks is used.
const STEPS = [10, 25, 50, 100, 250, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 144e5, 216e5, 432e5, 864e5];

// drawTimeline draws job's attempts into body; tasks are the job's tasks in graph order.
export function drawTimeline(body, j, tasks) {
  const attempts = new Map(tasks.map((t) => [t.id, []]));
  for (const a of j.attempts) if (attempts.has(a.task_id)) attempts.get(a.task_id).push(a);
  const waits = (t) => taskState(t.state).claimable && t.not_before;
  const t0 = ts(j.created_at);
  let t1 = j.finished_at ? ts(j.finished_at) : now();
  for (const a of j.attempts) t1 = Math.max(t1, a.finished_at ? ts(a.finished_at) : now());
  for (const t of tasks) if (waits(t)) t1 = Math.max(t1, ts(t.not_before));
  const span = Math.max((t1 - t0) * 1.02, 100);
  const LABEL = 200, ROW = 26, TOP = 26, RIGHT = 24;
  const width = Math.max(body.clientWidth || 900, 640);
  const plotW = width - LABEL - RIGHT;
  const x = (t) => LABEL + (t - t0) / span * plotW;
  const height = TOP + tasks.length * ROW + 8;
  const svg = s('svg', { class: 'gantt', width, height, viewBox: `0 0 ${width} ${height}` },
    s('defs', null, s('pattern', { id: 'stripes', width: 8, height: 8, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
      s('rect', { class: 'stripe-a', width: 8, height: 8 }),
      s('rect', { class: 'stripe-b', width: 4, height: 8 }))));
  const step = STEPS.find((st) => span / st <= 8) || 864e5;
  for (let t = 0; t <= span; t += step) {
    svg.append(s('line', { class: 'gridline', x1: x(t0 + t), x2: x(t0 + t), y1: TOP - 6, y2: height }),
      s('text', { x: x(t0 + t), y: 14, 'text-anchor': 'middle', text: t === 0 ? '0' : '+' + dur(t) }));
  }
  tasks.forEach((t, i) => {
    const y = TOP + i * ROW;
    const row = s('g', { 'data-task': t.name },
      s('rect', { class: 'row-bg' + (i % 2 ? ' alt' : ''), x: 0, y, width, height: ROW }),
      s('circle', { class: 'dot st-' + t.state, cx: 10, cy: y + ROW / 2, r: 4 }),
      s('text', { class: 'label', x: 22, y: y + ROW / 2 + 4, text: t.name.length > 24 ? t.name.slice(0, 23) + '…' : t.name }, svgTitle(t.name + ' — ' + t.state)));
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
        x: x(st), y: y + 6, width: w, height: ROW - 12, rx: 3 }, svgTitle(lines.join('\n'))));
    }
    if (waits(t) && ts(t.not_before) > now()) {
      const last = attempts.get(t.id).slice(-1)[0];
      const from = last && last.finished_at ? ts(last.finished_at) : now();
      row.append(s('rect', { class: 'backoff', x: x(from), y: y + 8, width: Math.max(x(ts(t.not_before)) - x(from), 2), height: ROW - 16, rx: 3 },
        svgTitle(`${t.name}: retry at ${fmtTime(t.not_before)}`)));
    }
    svg.append(row);
  });
  if (!j.finished_at) {
    const nx = x(now());
    svg.append(s('line', { class: 'now', x1: nx, x2: nx, y1: TOP - 6, y2: height }));
  }
  body.replaceChildren(svg);
}
