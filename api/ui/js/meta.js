// What GET /api/meta says: the role signed in, the pages the server registered, and every
// job and task state in the order to list them, with what each means. The dashboard names
// no state in its code, so it shows the states of the server it talks to.
import { api } from './api.js';

let meta = { user: '', pages: [], states: { jobs: [], tasks: [] } };
let jobs = new Map();
let tasks = new Map();

// loadMeta reads the meta once, at start. Should it fail, the frame draws without pages or
// states, and the next page load tries again.
export async function loadMeta() {
  try { meta = { ...meta, ...(await api('/api/meta')) }; } catch (e) { /* keep defaults */ }
  jobs = new Map(meta.states.jobs.map((st) => [st.name, st]));
  tasks = new Map(meta.states.tasks.map((st) => [st.name, st]));
}

export function user() { return meta.user || ''; }
export function pages() { return meta.pages; }

// jobStates and taskStates are every state, in the order the dashboard lists them.
export function jobStates() { return meta.states.jobs; }
export function taskStates() { return meta.states.tasks; }

// A state the meta does not describe gets no flag: no button, no polling, no highlight.
export function jobState(name) { return jobs.get(name) || { name }; }
export function taskState(name) { return tasks.get(name) || { name }; }

// jobActive: the job may still change on its own, so what shows it is re-read.
export function jobActive(name) { return jobs.has(name) && !jobs.get(name).ended; }
