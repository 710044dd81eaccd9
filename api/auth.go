package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Authentication, when a token is configured:
//
//   - programs send "Authorization: Bearer <token>";
//   - browsers log in once, through the form the dashboard shows (POST /login) or a link
//     ending in ?token=<token>, and get an HttpOnly, SameSite=Strict session cookie holding an
//     HMAC of the token, never the token itself; changing the token ends every session;
//   - /healthz stays open, for load balancers; everything else, /metrics included, needs the
//     token (Prometheus: `authorization: {credentials: <token>}` in the scrape config);
//   - static assets (the dashboard's CSS and JS, no data) are served to anyone, so that the
//     login page can be styled.
//
// Without a token the server only listens on loopback (CheckListen) and only answers
// requests that name it by a loopback host, which defeats DNS rebinding: a web page the
// operator visits cannot reach the dashboard through a name of its own that resolves to
// 127.0.0.1.
//
// With or without a token, state-changing requests (POST) are refused when the browser says
// they come from another site (Sec-Fetch-Site, Origin), so a page elsewhere cannot make a
// logged-in browser cancel or submit jobs.

const sessionCookie = "deckhand_session"

type authenticator struct {
	token   string
	session string // cookie value: HMAC-SHA256 of a fixed label, keyed by the token
}

func newAuthenticator(token string) *authenticator {
	a := &authenticator{token: token}
	if token != "" {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("deckhand dashboard session v1"))
		a.session = hex.EncodeToString(m.Sum(nil))
	}
	return a
}

// equal compares in constant time, whatever the lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return hmac.Equal(ha[:], hb[:])
}

func (a *authenticator) validToken(t string) bool { return a.token != "" && equal(t, a.token) }

// authenticated reports whether r carries the token or a valid session cookie.
func (a *authenticator) authenticated(r *http.Request) bool {
	if a.token == "" {
		return true
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, ok := strings.Cut(h, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && a.validToken(strings.TrimSpace(cred))
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return equal(c.Value, a.session)
	}
	return false
}

func (a *authenticator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w)
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if a.token == "" && !loopbackHost(hostOnly(r.Host)) {
			writeError(w, http.StatusForbidden, fmt.Sprintf(
				"this server has no token and only answers requests addressed to a loopback name, not %q: set --http-token to serve other names", r.Host))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossSite(r) {
			writeError(w, http.StatusForbidden, "cross-site request refused")
			return
		}
		if a.token == "" || strings.HasPrefix(r.URL.Path, "/assets/") || r.URL.Path == "/login" {
			next.ServeHTTP(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet {
			if !a.validToken(t) {
				a.refuse(w, r, "That token is not the right one.")
				return
			}
			// Log in, then drop the token from the address bar and the history.
			a.setSession(w, r)
			q := r.URL.Query()
			q.Del("token")
			u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		if !a.authenticated(r) {
			a.refuse(w, r, "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers 401: the login page to a browser asking for a page, JSON to everything else.
func (a *authenticator) refuse(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") && r.URL.Path != "/metrics" &&
		strings.Contains(r.Header.Get("Accept"), "text/html") {
		loginPage(w, http.StatusUnauthorized, msg)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="deckhand"`)
	if msg == "" {
		msg = "authentication required: send Authorization: Bearer <token>"
	}
	writeError(w, http.StatusUnauthorized, msg)
}

func (a *authenticator) setSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: a.session, Path: "/", MaxAge: int((30 * 24 * time.Hour).Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r),
	})
}

// login is the target of the login form.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.auth.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil || !s.auth.validToken(r.PostForm.Get("token")) {
		loginPage(w, http.StatusUnauthorized, "That token is not the right one.")
		return
	}
	s.auth.setSession(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// crossSite reports whether the browser says r comes from a page of another origin.
// Programs (curl, Prometheus) send neither header and are judged by their token alone.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
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
	// The login link carries the token: never hand the address to another site.
	h.Set("Referrer-Policy", "no-referrer")
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

// CheckListen refuses to serve beyond this machine without a token: an address whose host
// is empty (every interface), a non-loopback address, or a name other than localhost.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:8080", addr)
	}
	if token == "" && !loopbackHost(host) {
		return fmt.Errorf("--http %s would serve beyond this machine without a token: set --http-token or DECKHAND_HTTP_TOKEN, or listen on 127.0.0.1", addr)
	}
	return nil
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return ln, nil
}
