// Small pieces every page uses: state pills, times, load bars.
import { h } from './dom.js';
import { ago } from './format.js';

// pill is a state (of a job, task, node, worker or page item) as a coloured label; app.css
// colours st-<state>.
export function pill(state, big) {
  return h('span', { class: 'pill st-' + state + (big ? ' lg' : ''), text: state });
}

// timeCell is how long ago v was, with the full time as its tooltip.
export function timeCell(v) {
  return h('span', { title: v ? new Date(v).toLocaleString() : '', text: ago(v) });
}

// meter is a one-colour bar filled to pct percent, with label beside it.
export function meter(cls, pct, label) {
  const bar = h('div', { class: 'bar' }, h('span', { class: cls }));
  // The width through the CSSOM: the content security policy forbids style attributes.
  bar.firstChild.style.width = pct + '%';
  return h('div', { class: 'progress' }, bar, h('span', { class: 't', text: label }));
}
