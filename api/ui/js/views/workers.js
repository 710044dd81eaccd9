// The workers: deckhand serve processes, the leader, what each runs.
import { api } from '../api.js';
import { h } from '../dom.js';
import { ago, num } from '../format.js';
import { meter, pill, timeCell } from '../widgets.js';

export class WorkersView {
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
      return h('tr', { 'data-worker': w.id },
        h('td', { class: 'id', text: '#' + w.id }),
        h('td', null, h('b', { text: w.name }), w.is_leader ? h('span', { class: 'chip inline', text: '★ leader' }) : null),
        h('td', null, pill(status)),
        h('td', null, meter('st-running', Math.min(100, 100 * w.running_tasks / Math.max(w.concurrency, 1)), `${w.running_tasks}/${w.concurrency}`)),
        h('td', { class: 'nowrap muted' }, timeCell(w.started_at)),
        h('td', { class: 'nowrap muted' }, timeCell(w.heartbeat_at)),
        h('td', { class: 'nowrap muted' }, w.stopped_at ? h('span', null, 'stopped ', timeCell(w.stopped_at)) : h('span', { text: 'expires ' + ago(w.lease_expires_at) })));
    }));
  }

  poll() { return true; }
}
