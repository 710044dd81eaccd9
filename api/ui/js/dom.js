// Building the page. Text is always set as text, never parsed as HTML: job descriptions,
// SQL and error messages come from the catalog, and the content security policy forbids
// inline script anyway.

export const $ = (sel, root = document) => root.querySelector(sel);

// h builds an HTML element: attrs become attributes ("text" its text, "on…" listeners),
// children are appended, strings as text nodes.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';

// s is h for SVG elements.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

// svgTitle is the tooltip of an SVG element.
export function svgTitle(text) { return s('title', { text }); }

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// toast shows msg for a few seconds, errors longer.
export function toast(msg, isError) {
  const t = h('div', { class: 'toast' + (isError ? ' error' : ''), text: msg });
  $('#toasts').append(t);
  setTimeout(() => t.remove(), isError ? 7000 : 3500);
}
