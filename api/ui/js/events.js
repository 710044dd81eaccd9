// Live updates: GET /api/events, server-sent events carrying hints.
//
// The browser reconnects a stream that breaks by itself, but gives up for good when a
// reconnect is answered with an error rather than a stream (the server restarting behind a
// proxy, its stream limit, a sign-in that ended): then this module opens a new stream,
// waiting 1 s, doubling up to 30 s, until one says hello.
import { setServerTime } from './format.js';
import { refreshSoon } from './refresh.js';
import { summaryChanged } from './summary.js';
import { showLive } from './topbar.js';

const firstRetry = 1000;
const maxRetry = 30000;
let retry = firstRetry;

export function connectEvents() {
  const es = new EventSource('/api/events');
  es.addEventListener('hello', () => {
    retry = firstRetry;
    showLive(true, 'live');
    refreshSoon();
  });
  // A change names no job: re-read what is on screen, which shows only what this role may see.
  es.addEventListener('change', () => {
    summaryChanged();
    refreshSoon();
  });
  es.addEventListener('heartbeat', (e) => {
    const t = Date.parse(JSON.parse(e.data).time);
    if (!isNaN(t)) setServerTime(t);
  });
  es.onerror = () => {
    showLive(false, 'reconnecting');
    if (es.readyState !== EventSource.CLOSED) return; // the browser is reconnecting
    es.close();
    setTimeout(connectEvents, retry);
    retry = Math.min(2 * retry, maxRetry);
  };
}
