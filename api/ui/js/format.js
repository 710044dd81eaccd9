// Numbers, sizes, durations and times as the dashboard writes them.

// The server's clock, so that durations of running things do not depend on this machine's.
let clockSkew = 0;

// setServerTime takes t (ms since the epoch) as the server's time now.
export function setServerTime(t) { clockSkew = t - Date.now(); }
export function now() { return Date.now() + clockSkew; }
export function ts(v) { return v ? Date.parse(v) : null; }

const nf = new Intl.NumberFormat();
export function num(n) { return nf.format(n || 0); }

// compact fits a count on a card: 12.3k, 4.5M.
export function compact(n) {
  if (n < 10000) return num(n);
  if (n < 1e6) return (n / 1000).toFixed(n < 1e5 ? 1 : 0).replace(/\.0$/, '') + 'k';
  return (n / 1e6).toFixed(1).replace(/\.0$/, '') + 'M';
}

export function dur(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '—';
  if (ms < 0) ms = 0;
  if (ms < 1000) return Math.round(ms) + 'ms';
  const sec = ms / 1000;
  if (sec < 60) return (sec < 10 ? sec.toFixed(1) : Math.round(sec)) + 's';
  const m = Math.floor(sec / 60), r = Math.floor(sec % 60);
  if (m < 60) return m + 'm ' + String(r).padStart(2, '0') + 's';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
}

// ago is how long before the server's now v was, or how long after.
export function ago(v) {
  const t = ts(v);
  if (t === null) return '—';
  const d = now() - t;
  if (d < -1500) return 'in ' + dur(-d);
  if (d < 5000) return 'just now';
  return dur(d).split(' ')[0] + ' ago';
}

export function fmtTime(v) {
  return v ? new Date(v).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' }) : '—';
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  n = Number(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : Math.round(n)) + ' ' + u[i];
}

// statementProgress reads a running task's progress (pg_stat_progress_*) as
// "building index: scanning table 45% (2,431/5,400 blocks)".
export function statementProgress(p) {
  if (!p) return '';
  const phase = p.phase || p.command;
  if (p.total > 0) return `${phase} ${Math.min(100, Math.floor((100 * p.done) / p.total))}% (${num(p.done)}/${num(p.total)} ${p.unit})`;
  return `${phase} ${num(p.done)} ${p.unit}`;
}
