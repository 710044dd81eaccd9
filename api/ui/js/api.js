// The JSON API client: every request goes out with the session cookie.

export class APIError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

// api answers the JSON body of path, or throws an APIError carrying the server's one-line
// error message.
export async function api(path, opts = {}) {
  const res = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json', ...(opts.headers || {}) }, ...opts });
  if (res.status === 401) {
    // The session ended (signed out, or idle too long): the server shows its sign-in page.
    location.reload();
    throw new APIError(401, 'authentication required');
  }
  let body = null;
  try { body = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) throw new APIError(res.status, (body && body.error) || res.statusText);
  return body;
}
