// Live updates: GET /api/events, server-sent events carrying hints.
import { setServerTime } from './format.js';
import { refreshSoon } from './refresh.js';
import { summaryChanged } from './summary.js';
import { showLive } from './topbar.js';

export function connectEvents() {
  const es = new EventSource('/api/events');
  es.addEventListener('hello', () => { showLive(true, 'live'); refreshSoon(); });
  // A change names no job: re-read what is on screen, which shows only what this role may see.
  es.addEventListener('change', () => {
    summaryChanged();
    refreshSoon();
  });
  es.addEventListener('heartbeat', (e) => {
    const t = Date.parse(JSON.parse(e.data).time);
    if (!isNaN(t)) setServerTime(t);
  });
  es.onerror = () => showLive(false, 'reconnecting');
}
