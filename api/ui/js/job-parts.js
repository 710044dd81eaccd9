// What the jobs list and the job page both show of a job, and the buttons that act on it.
import { api } from './api.js';
import { h, toast } from './dom.js';
import { dur, now, ts } from './format.js';
import { jobState, taskStates } from './meta.js';
import { refreshSoon } from './refresh.js';

const done = { cancel: 'cancel requested', retry: 'retried', pause: 'pause requested', resume: 'resumed' };

async function controlJob(id, action) {
  try {
    const r = await api(`/api/jobs/${id}/${action}`, { method: 'POST' });
    toast(`Job #${id} ${done[action]}: ${r.state}`);
    refreshSoon();
  } catch (e) {
    toast(e.message, true);
  }
}

// actionButtons are Pause or Resume, Cancel and Retry, as the job's state allows.
export function actionButtons(job, small) {
  const cls = small ? ' btn-sm' : '';
  const st = jobState(job.state);
  const out = [];
  for (const action of ['pause', 'resume']) {
    if (!st[action]) continue;
    out.push(h('button', {
      class: 'btn' + cls, 'data-action': action, 'data-job': job.id, text: action === 'pause' ? 'Pause' : 'Resume',
      onclick: (e) => { e.stopPropagation(); e.currentTarget.disabled = true; controlJob(job.id, action); },
    }));
  }
  if (st.cancel) {
    out.push(h('button', {
      class: 'btn btn-danger' + cls, 'data-action': 'cancel', 'data-job': job.id, text: 'Cancel',
      onclick: (e) => { e.stopPropagation(); e.currentTarget.disabled = true; controlJob(job.id, 'cancel'); },
    }));
  }
  if (st.retry) {
    out.push(h('button', {
      class: 'btn' + cls, 'data-action': 'retry', 'data-job': job.id, text: 'Retry',
      onclick: (e) => { e.stopPropagation(); e.currentTarget.disabled = true; controlJob(job.id, 'retry'); },
    }));
  }
  return out;
}

// progressBar shows the job's ended tasks by state, out of all of them. A job counts the
// tasks of each ended state as tasks_<state>.
export function progressBar(j, big) {
  const total = Math.max(j.tasks_total, 1);
  const seg = (n, st) => n > 0 ? h('span', { class: 'st-' + st, 'data-w': (100 * n / total).toFixed(2) }) : null;
  const bar = h('div', { class: 'bar' + (big ? ' lg' : '') },
    taskStates().filter((st) => st.ended).map((st) => seg(j['tasks_' + st.name], st.name)));
  // Widths through the CSSOM: the content security policy forbids style attributes.
  for (const sp of bar.children) sp.style.width = sp.dataset.w + '%';
  return h('div', { class: 'progress' }, bar, h('span', { class: 't', text: `${j.tasks_done}/${j.tasks_total}` }));
}

// jobDuration is how long the job took, or has run so far.
export function jobDuration(j) {
  const start = ts(j.created_at);
  const end = j.finished_at ? ts(j.finished_at) : now();
  return dur(end - start) + (j.finished_at ? '' : '…');
}
