// A page the server registered (exports, cleanup, or one of a program embedding the
// server): a table of GET /api/<name>'s items, with the columns and formats /api/meta
// describes.
import { api } from '../api.js';
import { h } from '../dom.js';
import { bytes, dur, num } from '../format.js';
import { meter, pill, timeCell } from '../widgets.js';

const NUMERIC = ['number', 'bytes', 'bytes_per_s', 'duration_ms'];

export class PageView {
  constructor(root, page) {
    this.page = page;
    this.tbody = h('tbody');
    root.append(
      h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', { text: page.title }),
        page.description ? h('div', { class: 'sub', text: page.description }) : null)),
      h('div', { class: 'card' }, h('div', { class: 'table-wrap' }, h('table', null,
        h('thead', null, h('tr', null, page.columns.map((c) => h('th', { class: NUMERIC.includes(c.format) ? 'num' : null, text: c.title })))),
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
        return h('td', null, meter('st-done', total ? Math.min(100, 100 * (v || 0) / total) : 0, `${v || 0}/${total}`));
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
