package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Callers are catalog roles, and the server checks a role's password by connecting to the
// catalog as that role. The connection is the server's own catalog conninfo with only the
// user and the password replaced, and the password is always the caller's: an empty one is
// refused before connecting, so the server's pgpass file, PGPASSWORD or service file never
// stand in for it. The connection also requires the catalog to check a password
// (require_auth): under `trust` in pg_hba.conf anyone could claim any role, so such a
// sign-in is refused, and the server log says why.

// passwordMethods are the authentication exchanges in which the catalog checks a password.
const passwordMethods = "scram-sha-256,md5,password"

const msgRefused = "role or password not accepted"

// sessionPool sizes a caller's pool: one connection covers a dashboard's reads; a few allow
// the reads of a page in parallel. Idle connections are closed (and reopened on demand with
// the same password), so signed-in sessions hold no catalog connection while unused.
const (
	sessionMaxConns = 3
	sessionConnIdle = 5 * time.Minute
)

// connectAs opens a small pool on the catalog as role, checking password on the way.
func (s *Server) connectAs(ctx context.Context, role, password string) (*engine.Client, error) {
	cfg := s.client.Catalog().Pool.Config()
	cfg.BeforeConnect = nil // nothing may supply other credentials
	cc := cfg.ConnConfig
	cc.User, cc.Password, cc.RequireAuth = role, password, passwordMethods
	cc.RuntimeParams["application_name"] = "deckhand api"
	cfg.MinConns, cfg.MaxConns, cfg.MaxConnIdleTime = 0, sessionMaxConns, sessionConnIdle
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s.client.As(catalog.New(pool)), nil
}

// refusal is why a request was not let in.
type refusal struct {
	code int
	msg  string
	wait time.Duration // 429: when to try again
}

// signIn checks role and password and opens a session under key for them.
func (s *Server) signIn(r *http.Request, role, password, key string, basic bool) (*session, *refusal) {
	if role == "" || password == "" {
		return nil, &refusal{code: http.StatusUnauthorized, msg: "a role and its password are required"}
	}
	if len(role) > 63 || len(password) > 1024 || strings.ContainsRune(role, 0) || strings.ContainsRune(password, 0) {
		return nil, &refusal{code: http.StatusUnauthorized, msg: msgRefused}
	}
	addr := clientAddr(r.RemoteAddr)
	if ok, wait := s.limits.reserve(addr, role); !ok {
		return nil, &refusal{code: http.StatusTooManyRequests, wait: wait,
			msg: fmt.Sprintf("too many failed sign-ins: try again in %d s", retrySeconds(wait))}
	}
	client, err := s.connectAs(r.Context(), role, password)
	if err != nil {
		ref, counts := s.signInFailure(role, addr, err)
		if !counts {
			s.limits.refund(addr, role)
		}
		return nil, ref
	}
	s.limits.refund(addr, role)
	sess, err := s.sessions.add(&session{key: key, role: role, client: client, basic: basic})
	if err != nil {
		return nil, &refusal{code: http.StatusServiceUnavailable, msg: err.Error()}
	}
	if basic {
		s.log.Debug("api caller checked", "role", role, "addr", addr)
	} else {
		s.log.Info("api sign-in", "role", role, "addr", addr)
	}
	return sess, nil
}

// signInFailure says what the caller is told when connecting failed, and whether the attempt
// counts against the sign-in limits: a wrong password does, a catalog that did not answer
// does not.
func (s *Server) signInFailure(role, addr string, err error) (*refusal, bool) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28"):
		s.log.Info("api sign-in refused", "role", role, "addr", addr, "reason", pgErr.Message)
		return &refusal{code: http.StatusUnauthorized, msg: msgRefused}, true
	case strings.Contains(err.Error(), "require_auth"):
		s.log.Warn("api sign-in refused: the catalog let the role in without checking a password; "+
			"pg_hba.conf must require one (scram-sha-256) for this server's address", "role", role, "addr", addr)
		return &refusal{code: http.StatusUnauthorized, msg: msgRefused}, true
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return &refusal{code: http.StatusForbidden, msg: fmt.Sprintf("role %s may not connect to the catalog database", role)}, false
	default:
		s.log.Warn("api sign-in: cannot reach the catalog", "role", role, "err", nodeconn.Redact(spec.OneLine(err.Error())))
		return &refusal{code: http.StatusServiceUnavailable, msg: "cannot check the password now: the catalog did not answer"}, false
	}
}

func retrySeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// basicSession is the session of a program sending HTTP Basic credentials: checked once,
// then cached for a short while under an HMAC of the credentials (keyed by a secret of this
// process, so the key reveals nothing of the password).
func (s *Server) basicSession(r *http.Request, role, password string) (*session, *refusal) {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(role + "\x00" + password))
	key := "basic:" + hex.EncodeToString(m.Sum(nil))
	if sess := s.sessions.get(key); sess != nil {
		return sess, nil
	}
	return s.signIn(r, role, password, key, true)
}

// login is the target of the sign-in form.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		loginPage(w, http.StatusBadRequest, "The form could not be read.", "")
		return
	}
	role, password := r.PostForm.Get("role"), r.PostForm.Get("password")
	id, key := newSessionID()
	_, ref := s.signIn(r, role, password, key, false)
	if ref != nil {
		if ref.wait > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(ref.wait)))
		}
		loginPage(w, ref.code, sentence(ref.msg), role)
		return
	}
	// A browser signing in again leaves its previous session behind: end it.
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(cookieKey(c.Value))
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the browser's session, closing its catalog connections.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(cookieKey(c.Value))
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isHTTPS(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sentence capitalizes msg and ends it with a period, for the sign-in page.
func sentence(msg string) string {
	if msg == "" {
		return ""
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}
