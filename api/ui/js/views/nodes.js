// The nodes: the target PostgreSQL servers, their load and their last probe.
import { api } from '../api.js';
import { h } from '../dom.js';
import { meter, pill, timeCell } from '../widgets.js';

export class NodesView {
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
    this.tbody.replaceChildren(...nodes.map((n) => h('tr', { 'data-node': n.name },
      h('td', { class: 'nowrap' }, h('b', { text: n.name })),
      h('td', { class: 'nowrap muted', text: n.group }),
      h('td', null, pill(n.role)),
      // A full node shows in the colour of trouble.
      h('td', null, meter(n.running_tasks >= n.max_tasks ? 'st-cancelling' : 'st-running',
        Math.min(100, 100 * n.running_tasks / n.max_tasks), `${n.running_tasks}/${n.max_tasks}`)),
      h('td', { class: 'mono muted', text: n.dsn }),
      h('td', { class: 'mono muted', text: n.replay_lsn || '—' }),
      h('td', { class: 'nowrap muted' }, timeCell(n.checked_at)),
      h('td', { class: 'err', title: n.last_error || '', text: n.last_error || '' }))));
  }

  poll() { return true; }
}
