package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Authentication. Every caller of the API and the dashboard is a catalog role, and every
// request runs on a catalog client of that role (see login.go and sessions.go):
//
//   - browsers sign in through the form the dashboard shows (POST /login: role and
//     password) and get an HttpOnly, SameSite=Strict cookie holding a random 256-bit session
//     id, never the password; POST /logout ends the session;
//   - programs send HTTP Basic credentials (role and password) with every request;
//   - /metrics answers to "Authorization: Bearer <Config.MetricsToken>" (Prometheus), or,
//     without a token, only to this machine;
//   - /healthz and the static assets (the dashboard's CSS and JS, no data) are open.
//
// State-changing requests (POST) are refused when the browser says they come from another
// site (Sec-Fetch-Site, Origin), so a page elsewhere can neither act through a signed-in
// browser nor sign it in as a role of its choosing.

const sessionCookie = "deckhand_session"

// equal compares in constant time, whatever the lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return hmac.Equal(ha[:], hb[:])
}

func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w)
		path := r.URL.Path
		if path == "/healthz" || strings.HasPrefix(path, "/assets/") {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossSite(r) {
			writeError(w, http.StatusForbidden, "cross-site request refused")
			return
		}
		switch path {
		case "/metrics":
			if s.metricsAllowed(w, r) {
				next.ServeHTTP(w, r)
			}
			return
		case "/login", "/logout":
			next.ServeHTTP(w, r)
			return
		}
		sess, ref := s.authenticate(r)
		if ref != nil {
			s.refuse(w, r, ref)
			return
		}
		if path != "/api/events" { // a stream: it ends when its catalog listener fails
			ctx, cancel := context.WithTimeoutCause(r.Context(), catalogTimeout(r), errCatalogTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, withCaller(r, sess))
	})
}

// errCatalogTimeout ends a request whose catalog statements took longer than catalogTimeout.
var errCatalogTimeout = errors.New("the catalog did not answer in time")

// catalogTimeout bounds a request's time on the catalog: a catalog that stopped answering
// without closing the session's connection (a stopped server, packets dropped) would hold it
// for ever. Reads get what a worker's catalog calls get; a submission more, for it asks each
// of its nodes (each bounded on its own) before it writes.
func catalogTimeout(r *http.Request) time.Duration {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return readTimeout
	}
	return writeTimeout
}

// The deadlines of catalogTimeout; variables so that tests can make a request outlive them
// in seconds rather than in a minute.
var (
	readTimeout  = 10 * time.Second
	writeTimeout = time.Minute
)

// authenticate finds the caller's session: from Basic credentials, or the session cookie.
func (s *Server) authenticate(r *http.Request) (*session, *refusal) {
	if h := r.Header.Get("Authorization"); h != "" {
		role, password, ok := r.BasicAuth()
		if !ok {
			return nil, &refusal{code: http.StatusUnauthorized,
				msg: "send a catalog role and its password with HTTP Basic authentication (a bearer token opens /metrics only)"}
		}
		return s.basicSession(r, role, password)
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, &refusal{code: http.StatusUnauthorized,
			msg: "authentication required: sign in, or send a catalog role and its password with HTTP Basic authentication"}
	}
	if sess := s.sessions.get(cookieKey(c.Value)); sess != nil && !sess.basic {
		return sess, nil
	}
	// No Basic challenge here: a dashboard whose session ended reloads into the sign-in page
	// rather than have the browser prompt for credentials.
	return nil, &refusal{code: http.StatusUnauthorized, msg: "your session has ended: sign in again"}
}

// refuse answers a refused request: the sign-in page to a browser asking for a page, JSON
// to everything else.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, ref *refusal) {
	if ref.wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(ref.wait)))
	}
	_, err := r.Cookie(sessionCookie)
	hadSession := err == nil
	if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") && strings.Contains(r.Header.Get("Accept"), "text/html") {
		msg := ""
		if hadSession || r.Header.Get("Authorization") != "" || ref.code != http.StatusUnauthorized {
			msg = sentence(ref.msg)
		}
		loginPage(w, ref.code, msg, "")
		return
	}
	if !hadSession && ref.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="deckhand", charset="UTF-8"`)
	}
	writeError(w, ref.code, ref.msg)
}

// metricsAllowed lets a scrape of /metrics through, or answers why not. /metrics shows
// catalog-wide counts, node names and this process's figures to whoever may read it: the
// bearer token when one is set, else this machine only (by peer address, and by the name the
// request used, which defeats DNS rebinding: a web page the operator visits cannot reach it
// through a name of its own that resolves to 127.0.0.1).
func (s *Server) metricsAllowed(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.MetricsToken != "" {
		scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(cred), s.cfg.MetricsToken) {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="deckhand metrics"`)
		writeError(w, http.StatusUnauthorized, "/metrics needs Authorization: Bearer <the --http-token of this server>")
		return false
	}
	if loopbackHost(hostOnly(r.RemoteAddr)) && loopbackHost(hostOnly(r.Host)) {
		return true
	}
	writeError(w, http.StatusForbidden, fmt.Sprintf(
		"without a token, /metrics only answers this machine by a loopback name, not %q from %s: set --http-token (DECKHAND_HTTP_TOKEN) to scrape it from elsewhere",
		r.Host, hostOnly(r.RemoteAddr)))
	return false
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// crossSite reports whether the browser says r comes from a page of another origin: by
// Sec-Fetch-Site when it sends one, else by Origin. Programs (curl, Prometheus) send neither
// header and are judged by their credentials alone.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err != nil || !strings.EqualFold(u.Host, r.Host)
	}
	return false
}

func setSecurityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// Same-origin rather than no-referrer: under no-referrer, browsers send "Origin: null"
	// with the sign-in form, which crossSite must refuse.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "+
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// loopbackHost reports whether host names this machine only: localhost or a loopback address.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckListen checks that addr is HOST:PORT.
func CheckListen(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:8080", addr)
	}
	return nil
}

func listen(addr string) (net.Listener, error) {
	if err := CheckListen(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return ln, nil
}
