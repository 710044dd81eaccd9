// The "Submit a job" dialog (its markup is in index.html).
import { api } from './api.js';
import { $, toast } from './dom.js';

const EXAMPLE_SPEC = `{
  "description": "analyze after the nightly load",
  "tasks": [
    {"name": "load", "node": "NODE", "sql": "SELECT pg_sleep(2)"},
    {"name": "analyze", "node": "NODE", "sql": "ANALYZE", "depends_on": ["load"]}
  ]
}`;

// openSubmit opens the dialog, with an example naming a real node the first time.
export async function openSubmit() {
  const dlg = $('#submit-dialog');
  const ta = $('#submit-spec');
  if (!ta.value) {
    let node = 'NODE';
    try {
      const { nodes } = await api('/api/nodes');
      if (nodes.length) node = nodes[0].name;
    } catch (e) { /* keep the placeholder */ }
    ta.value = EXAMPLE_SPEC.replaceAll('NODE', node);
  }
  $('#submit-error').hidden = true;
  dlg.showModal();
}

export function setupSubmit() {
  $('#submit-cancel').addEventListener('click', () => $('#submit-dialog').close());
  $('#submit-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const err = $('#submit-error');
    const ok = $('#submit-ok');
    ok.disabled = true;
    try {
      const text = $('#submit-spec').value;
      const type = text.trim().startsWith('{') ? 'application/json' : 'application/yaml';
      const r = await api('/api/jobs', { method: 'POST', body: text, headers: { 'Content-Type': type } });
      $('#submit-dialog').close();
      toast(`Submitted job #${r.id}`);
      location.hash = '#/jobs/' + r.id;
    } catch (ex) {
      err.textContent = ex.message;
      err.hidden = false;
    } finally {
      ok.disabled = false;
    }
  });
}
