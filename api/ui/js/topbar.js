// The top bar: the role signed in, the leader, the live indicator and the theme toggle.
import { $ } from './dom.js';

export function showUser(role) { $('#user').textContent = role; }

export function showLeader(id) {
  const leader = $('#leader');
  if (id) {
    leader.textContent = `leader · worker #${id}`;
    leader.className = 'chip';
  } else {
    leader.textContent = 'no leader';
    leader.className = 'chip warn';
  }
}

export function showLive(on, label) {
  const el = $('#live');
  el.className = 'live ' + (on ? 'on' : 'off');
  $('.label', el).textContent = label;
}

// setupTheme applies the stored theme, else the system's, and calls onChange after each
// switch, for what draws with colours it computed.
export function setupTheme(onChange) {
  const root = document.documentElement;
  const stored = localStorage.getItem('deckhand-theme');
  root.dataset.theme = stored || (matchMedia('(prefers-color-scheme: light)').matches ? 'light' : 'dark');
  $('#theme').addEventListener('click', () => {
    root.dataset.theme = root.dataset.theme === 'light' ? 'dark' : 'light';
    localStorage.setItem('deckhand-theme', root.dataset.theme);
    onChange();
  });
}
