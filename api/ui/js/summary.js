// The counts of jobs and tasks by state and the leader (GET /api/summary), read only when
// something may have changed them.
import { api } from './api.js';
import { showLeader } from './topbar.js';

let last = null;
let dirty = true;
let at = 0;

export function lastSummary() { return last; }

// summaryChanged marks the counts as worth reading again.
export function summaryChanged() { dirty = true; }

// summaryAge is how long ago (ms) the counts were last asked for.
export function summaryAge() { return Date.now() - at; }

// loadSummary reads the counts if they may have changed, shows the leader, and returns
// them; it returns null when they were not read.
export async function loadSummary() {
  if (!dirty) return null;
  dirty = false;
  at = Date.now();
  last = await api('/api/summary');
  showLeader(last.leader_id);
  return last;
}
