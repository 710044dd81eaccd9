// One job: its facts, graph, timeline, tasks (with their SQL) and errors.
import { api } from '../api.js';
import { h } from '../dom.js';
import { dur, fmtTime, now, setServerTime, statementProgress, ts } from '../format.js';
import { actionButtons, jobDuration, progressBar } from '../job-parts.js';
import { jobActive, taskState, taskStates } from '../meta.js';
import { pill } from '../widgets.js';
import { TaskGraph, graphOrder } from './graph.js';
import { OUTCOMES, drawTimeline } from './timeline.js';

export class JobView {
  constructor(root, id) {
    this.id = id;
    this.job = null;
    this.selected = null;
    this.head = h('div');
    const dagBody = h('div', { class: 'dag-wrap' });
    const legend = h('div', { class: 'legend' });
    this.graph = new TaskGraph(dagBody, legend, (name) => this.select(name));
    this.ganttBody = h('div', { class: 'gantt-wrap' });
    this.tasksBody = h('tbody');
    this.tasksNote = h('span', { class: 'muted' });
    this.errorsCard = h('div', { class: 'card', hidden: true });
    root.append(
      this.head,
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Graph' }), legend),
        dagBody),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Timeline' }),
          h('div', { class: 'legend' }, OUTCOMES.map((o) =>
            h('span', null, h('i', { class: 'st-' + o }), o)))),
        this.ganttBody),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', { class: 'grow', text: 'Tasks' }), this.tasksNote),
        h('div', { class: 'table-wrap' }, h('table', { class: 'tasks' },
          h('thead', null, h('tr', null, ['Task', 'State', 'Kind', 'Node', 'Owner', 'Attempts', 'Duration', 'Depends on', 'Last error']
            .map((t) => h('th', { class: t === 'Attempts' || t === 'Duration' ? 'num' : null, text: t })))),
          this.tasksBody))),
      this.errorsCard);
    this.resize = () => { if (this.job) { this.drawDAG(); this.drawGantt(); } };
    window.addEventListener('resize', this.resize);
  }

  unmount() { window.removeEventListener('resize', this.resize); }

  // The timeline is drawn again after a theme switch so that its SVG pattern (the stripes
  // of running attempts) takes the new theme's colours.
  onTheme() { if (this.job) this.drawGantt(); }

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
    setServerTime(ts(d.server_time));
    this.job = d;
    this.renderHead();
    this.drawDAG();
    this.drawGantt();
    this.renderTasks();
    this.renderErrors();
  }

  poll() { return this.job && jobActive(this.job.state); }
  tick() { if (this.job && jobActive(this.job.state)) this.renderFacts(); }

  drawDAG() { this.graph.draw(this.job.tasks, this.selected); }
  drawGantt() { drawTimeline(this.ganttBody, this.job, graphOrder(this.job.tasks)); }

  renderHead() {
    const j = this.job;
    this.facts = h('div', { class: 'facts' });
    this.renderFacts();
    // A job of more tasks than a page comes with its first page: its counts are the job's own
    // counters (tasks_<state> for the states that end a task, and those still pending).
    const counts = j.next_tasks_after
      ? [...taskStates().filter((st) => ('tasks_' + st.name) in j).map((st) => [st.name, j['tasks_' + st.name]]),
        ['pending', j.tasks_pending]]
      : this.countStates(j.tasks);
    this.tasksNote.textContent = j.next_tasks_after ? `the first ${j.tasks.length} of ${j.tasks_total}` : '';
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

  countStates(tasks) {
    const byState = new Map();
    for (const t of tasks) byState.set(t.state, (byState.get(t.state) || 0) + 1);
    return taskStates().filter((st) => byState.has(st.name)).map((st) => [st.name, byState.get(st.name)]);
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

  // select opens (or closes) a task's details in the table and highlights it in the graph.
  select(name) {
    this.selected = this.selected === name ? null : name;
    this.drawDAG();
    this.renderTasks();
    if (this.selected) {
      const row = this.tasksBody.querySelector(`tr[data-task="${CSS.escape(name)}"]`);
      if (row) row.scrollIntoView({ block: 'center', behavior: 'smooth' });
    }
  }

  renderTasks() {
    const rows = [];
    for (const t of graphOrder(this.job.tasks)) {
      const st = ts(t.started_at);
      const state = taskState(t.state);
      const en = t.finished_at ? ts(t.finished_at) : state.active ? now() : null;
      const err = t.last_error ? (t.last_error.sqlstate ? t.last_error.sqlstate + ': ' : '') + t.last_error.message : '';
      const open = this.selected === t.name;
      rows.push(h('tr', { class: 'link' + (open ? ' selected' : ''), 'data-task': t.name, 'data-state': t.state,
        onclick: () => this.select(t.name) },
      h('td', { class: 'nowrap' }, h('b', { text: t.name })),
      h('td', null, pill(t.state),
        t.progress ? h('div', { class: 'muted progress', 'data-progress': t.name, text: statementProgress(t.progress) }) : null),
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
            t.not_before && state.claimable ? [h('dt', { text: 'next attempt' }), h('dd', { text: fmtTime(t.not_before) })] : null))));
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
