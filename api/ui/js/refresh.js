// The view on screen and when it re-reads its data.
//
// A view is an object with optional methods: refresh() re-reads and redraws, poll() says
// whether something in it still moves (so it is re-read once a second), tick() redraws
// what runs on the clock, onSummary(sum) takes new counts, onTheme() redraws after a theme
// switch, unmount() lets go of what it holds outside its element.
import { loadSummary, summaryAge, summaryChanged } from './summary.js';

let view = null;
let refreshQueued = false;
let lastRefresh = 0;
let refreshing = false;

export function current() { return view; }

// show makes v the view on screen and reads its data at once.
export function show(v) {
  view = v;
  lastRefresh = 0;
  refreshQueued = false;
  summaryChanged();
  runRefresh();
}

// refreshSoon re-reads the current view, at most once a second.
export function refreshSoon() {
  if (refreshQueued) return;
  refreshQueued = true;
  const wait = Math.max(0, 1000 - (Date.now() - lastRefresh));
  setTimeout(runRefresh, wait);
}

async function runRefresh() {
  refreshQueued = false;
  if (refreshing) { refreshSoon(); return; }
  refreshing = true;
  lastRefresh = Date.now();
  try {
    await Promise.all([view && view.refresh ? view.refresh() : null, summary()]);
  } catch (e) {
    if (e.status !== 401) console.warn('refresh failed', e);
  } finally {
    refreshing = false;
  }
}

async function summary() {
  const sum = await loadSummary();
  if (sum && view && view.onSummary) view.onSummary(sum);
}

// startTicker: views with something still moving ask to be re-read; this ticks once a
// second. The counts and the leader are re-read every two seconds: the server shares one
// reading among every dashboard, so this costs the catalog nothing more per open tab.
export function startTicker() {
  setInterval(() => {
    if (document.hidden) return;
    if (summaryAge() >= 2000) {
      summaryChanged();
      summary().catch(() => {});
    }
    if (!view || !view.poll) return;
    if (view.poll()) refreshSoon();
    if (view.tick) view.tick();
  }, 1000);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshSoon(); });
}
