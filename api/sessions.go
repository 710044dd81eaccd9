package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/deckhandhq/deckhand/engine"
)

// A session is one caller's own catalog client. Every /api request of a signed-in browser,
// or of a program sending the same Basic credentials, runs on it: the catalog sees the
// caller's role as session_user and decides what it may see and do.
type session struct {
	key     string // the store's key: SHA-256 of the cookie, or an HMAC of the Basic credentials
	role    string
	client  *engine.Client
	basic   bool
	created time.Time
	used    time.Time     // guarded by the store's mutex
	done    chan struct{} // closed when the session ends; event streams on it stop
}

// maxSessionsPerRole bounds one role's browser sessions: a new sign-in beyond it ends that
// role's least recently used session, so that one role signing in again and again (a
// script, say) cannot take every slot of MaxSessions.
const maxSessionsPerRole = 10

var errTooManySessions = errors.New("too many signed-in sessions on this server: try again later")

// sessionStore holds the live sessions. Browser sessions end after Config.SessionIdle
// unused, or at sign-out; cached Basic credentials are checked again after basicTTL, so a
// changed password or a dropped role takes effect soon. Ending a session closes its pool.
type sessionStore struct {
	now         func() time.Time
	idle        time.Duration
	basicTTL    time.Duration
	maxSessions int
	maxBasic    int

	mu       sync.Mutex
	m        map[string]*session
	browsers int
	basics   int
	closed   bool
}

func (st *sessionStore) expired(s *session, now time.Time) bool {
	if s.basic {
		return now.Sub(s.created) >= st.basicTTL
	}
	return now.Sub(s.used) >= st.idle
}

// get returns the live session under key and marks it used.
func (st *sessionStore) get(key string) *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[key]
	if s == nil {
		return nil
	}
	now := st.now()
	if st.expired(s, now) {
		closer := st.endLocked(s)
		go closer()
		return nil
	}
	s.used = now
	return s
}

// add stores s. If a live session already holds its key (the same Basic credentials, checked
// twice at once), that one is kept and s is closed. It fails when browser sessions are at
// their cap.
func (st *sessionStore) add(s *session) (*session, error) {
	st.mu.Lock()
	var closers []func()
	defer func() {
		st.mu.Unlock()
		for _, c := range closers {
			go c()
		}
	}()
	if st.closed {
		closers = append(closers, s.client.Close)
		return nil, errors.New("the server is shutting down")
	}
	now := st.now()
	for _, o := range st.m {
		if st.expired(o, now) {
			closers = append(closers, st.endLocked(o))
		}
	}
	if o := st.m[s.key]; o != nil {
		closers = append(closers, s.client.Close)
		o.used = now
		return o, nil
	}
	if s.basic {
		if st.basics >= st.maxBasic {
			closers = append(closers, st.endLocked(st.oldest(func(o *session) bool { return o.basic })))
		}
	} else {
		if o, n := st.oldest(func(o *session) bool { return !o.basic && o.role == s.role }), st.count(s.role); n >= maxSessionsPerRole {
			closers = append(closers, st.endLocked(o))
		} else if st.browsers >= st.maxSessions {
			closers = append(closers, s.client.Close)
			return nil, errTooManySessions
		}
	}
	s.created, s.used, s.done = now, now, make(chan struct{})
	st.m[s.key] = s
	if s.basic {
		st.basics++
	} else {
		st.browsers++
	}
	return s, nil
}

func (st *sessionStore) oldest(match func(*session) bool) *session {
	var out *session
	for _, o := range st.m {
		if match(o) && (out == nil || o.used.Before(out.used)) {
			out = o
		}
	}
	return out
}

func (st *sessionStore) count(role string) int {
	n := 0
	for _, o := range st.m {
		if !o.basic && o.role == role {
			n++
		}
	}
	return n
}

// endLocked removes s and returns what closes its pool, to be called without the lock held:
// closing waits for the requests still using the pool.
func (st *sessionStore) endLocked(s *session) func() {
	if s == nil || st.m[s.key] != s {
		return func() {}
	}
	delete(st.m, s.key)
	if s.basic {
		st.basics--
	} else {
		st.browsers--
	}
	close(s.done)
	return s.client.Close
}

// remove ends the session under key, if any, and closes its pool before returning.
func (st *sessionStore) remove(key string) {
	st.mu.Lock()
	closer := func() {}
	if s := st.m[key]; s != nil {
		closer = st.endLocked(s)
	}
	st.mu.Unlock()
	closer()
}

// sweep ends expired sessions.
func (st *sessionStore) sweep() {
	st.mu.Lock()
	now := st.now()
	var closers []func()
	for _, s := range st.m {
		if st.expired(s, now) {
			closers = append(closers, st.endLocked(s))
		}
	}
	st.mu.Unlock()
	for _, c := range closers {
		c()
	}
}

// closeAll ends every session and refuses new ones.
func (st *sessionStore) closeAll() {
	st.mu.Lock()
	st.closed = true
	var closers []func()
	for _, s := range st.m {
		closers = append(closers, st.endLocked(s))
	}
	st.mu.Unlock()
	for _, c := range closers {
		c()
	}
}

// sizes reports the number of browser sessions and cached Basic credentials.
func (st *sessionStore) sizes() (browsers, basics int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.browsers, st.basics
}

// newSessionID returns a random 256-bit cookie value and the store key derived from it.
// The store keeps only the hash, so the map holds nothing a cookie could be forged from.
func newSessionID() (id, key string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	id = base64.RawURLEncoding.EncodeToString(b[:])
	return id, cookieKey(id)
}

func cookieKey(id string) string {
	sum := sha256.Sum256([]byte("cookie\x00" + id))
	return hex.EncodeToString(sum[:])
}

type callerKey struct{}

func withCaller(r *http.Request, s *session) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, s))
}

func callerOf(r *http.Request) *session {
	s, _ := r.Context().Value(callerKey{}).(*session)
	return s
}

// CallerClient is the catalog client of the role that sent r, for endpoints registered with
// Handle or AddPage: it reads and acts as that role. It is nil outside authenticated requests.
func CallerClient(r *http.Request) *engine.Client {
	if s := callerOf(r); s != nil {
		return s.client
	}
	return nil
}

// CallerRole is the catalog role that sent r, or "" outside authenticated requests.
func CallerRole(r *http.Request) string {
	if s := callerOf(r); s != nil {
		return s.role
	}
	return ""
}
