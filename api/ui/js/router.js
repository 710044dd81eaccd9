// Pages by URL fragment: #/jobs[?state=…], #/jobs/ID, #/p/NAME (a page the server
// registered), #/nodes, #/workers[?stopped=1].
import { $, h } from './dom.js';
import { pages } from './meta.js';
import { current, show } from './refresh.js';
import { JobView } from './views/job.js';
import { JobsView } from './views/jobs.js';
import { NodesView } from './views/nodes.js';
import { PageView } from './views/page.js';
import { WorkersView } from './views/workers.js';

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '') || 'jobs';
  const [path, query] = raw.split('?');
  return { parts: path.split('/').filter(Boolean), params: new URLSearchParams(query || '') };
}

function renderNav(active) {
  const nav = $('#nav');
  nav.replaceChildren();
  const items = [['jobs', 'Jobs'], ...pages().map((p) => ['p/' + p.name, p.title]), ['nodes', 'Nodes'], ['workers', 'Workers']];
  for (const [href, label] of items) {
    nav.append(h('a', { href: '#/' + href, class: active === href ? 'active' : '', text: label }));
  }
}

// route replaces the view on screen with the one the URL names; unknown URLs show the jobs.
export function route() {
  const { parts, params } = parseHash();
  const old = current();
  if (old && old.unmount) old.unmount();
  const main = $('#main');
  main.replaceChildren();
  let key = parts[0];
  let view;
  if (parts[0] === 'jobs' && parts[1]) view = new JobView(main, Number(parts[1]));
  else if (parts[0] === 'nodes') view = new NodesView(main);
  else if (parts[0] === 'workers') view = new WorkersView(main, params);
  else if (parts[0] === 'p' && parts[1]) {
    key = 'p/' + parts[1];
    const page = pages().find((p) => p.name === parts[1]);
    view = page ? new PageView(main, page) : new JobsView(main, params);
  } else { key = 'jobs'; view = new JobsView(main, params); }
  renderNav(key);
  show(view);
}
