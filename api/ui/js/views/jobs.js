// The jobs list: counts by state (a filter), the newest jobs, paging by id.
import { api } from '../api.js';
import { h } from '../dom.js';
import { compact, num } from '../format.js';
import { actionButtons, jobDuration, progressBar } from '../job-parts.js';
import { jobActive, jobStates } from '../meta.js';
import { openSubmit } from '../submit.js';
import { lastSummary } from '../summary.js';
import { pill, timeCell } from '../widgets.js';

export class JobsView {
  constructor(root, params) {
    this.state = params.get('state') || '';
    this.before = params.get('before') || '';
    this.jobs = [];
    // The before= cursors of the newer pages, so that "← Newer" walks back.
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
    const sum = lastSummary();
    if (sum) this.onSummary(sum);
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
    const states = jobStates().map((st) => st.name);
    let total = 0;
    for (const st of states) total += sum.jobs[st] || 0;
    const card = (st, label, n) => h('button', {
      class: 'count st-' + (st || 'all') + (this.state === st ? ' active' : ''), 'data-state': st || 'all',
      title: label + ': ' + num(n),
      onclick: () => { location.hash = this.link(this.state === st ? '' : st); },
    }, h('span', { class: 'n', text: compact(n) }), h('span', { class: 'l', text: label }));
    this.counts.replaceChildren(card('', 'all jobs', total), ...states.map((st) => card(st, st, sum.jobs[st] || 0)));
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

  // render draws the page of jobs; prev holds the states last shown, so that a job whose
  // state changed flashes.
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

  poll() { return this.jobs.some((j) => jobActive(j.state)); }
}
