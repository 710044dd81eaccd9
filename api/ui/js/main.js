// deckhand dashboard: plain JavaScript modules, no build step, no dependencies. This is the
// entry module, the only script index.html loads; the browser fetches the rest through the
// imports.
//
// Views render from the JSON API. Live updates come from /api/events (server-sent events
// carrying hints that job states changed); on top of that the view on screen re-reads its
// data at most once a second, and only while the tab is visible, for what no event
// announces (a task finishing inside a running job, worker heartbeats).
import { connectEvents } from './events.js';
import { loadMeta, user } from './meta.js';
import { current, startTicker } from './refresh.js';
import { route } from './router.js';
import { setupSubmit } from './submit.js';
import { setupTheme, showUser } from './topbar.js';

async function start() {
  startTicker();
  setupTheme(() => { const v = current(); if (v && v.onTheme) v.onTheme(); });
  setupSubmit();
  await loadMeta();
  showUser(user());
  window.addEventListener('hashchange', route);
  route();
  connectEvents();
  // Every module loaded and the first view is up: tests wait for this.
  document.documentElement.dataset.ready = '';
}

start();
