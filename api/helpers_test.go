package api_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/export"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a catalog with the API served over HTTP in front of it. Requests go out as
// user, a catalog role that is a deckhand admin, with HTTP Basic authentication.
type harness struct {
	*testenv.Env
	t    *testing.T
	srv  *api.Server
	http *httptest.Server
	reg  *prometheus.Registry
	user user
}

type option func(*api.Config)

func withMetricsToken(tok string) option { return func(c *api.Config) { c.MetricsToken = tok } }

func withClock(c *clock) option { return func(cfg *api.Config) { cfg.Now = c.now } }

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	e := testenv.New(t, drop.Feature(), move.Feature(), export.Feature())
	reg := prometheus.NewRegistry()
	cfg := api.Config{Client: e.Client, Registry: reg, Logger: quiet, Heartbeat: 200 * time.Millisecond, StatsMaxAge: time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	h := &harness{Env: e, t: t, srv: srv, http: hs, reg: reg}
	h.user = h.catalogUser("api", "deckhand_admin")
	return h
}

// user is a catalog role with its password, and a catalog client of its own.
type user struct {
	role, password string
	client         *engine.Client
}

// basic is the Authorization header of HTTP Basic authentication as u.
func (u user) basic() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.role+":"+u.password))
}

// catalogUser creates a login role that uses deckhand as a member of group
// (deckhand_submitter or deckhand_admin).
func (h *harness) catalogUser(prefix, group string) user {
	h.t.Helper()
	return h.setupUser(h.Role(prefix), group)
}

// setupUser makes an existing login role a user of deckhand, as catalogUser does.
func (h *harness) setupUser(role, group string) user {
	h.t.Helper()
	q := pgx.Identifier{role}.Sanitize()
	h.Exec("postgres", "GRANT "+group+" TO "+q)
	password := mustPassword(h.t, role)
	c, err := engine.Open(ctx, h.Cluster.DSN(h.DB, role))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	return user{role: role, password: password, client: c}
}

type response struct {
	code   int
	header http.Header
	body   string
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

// cookie is the session cookie r sets, as a Cookie header value, or "".
func (r response) cookie() string {
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "deckhand_session" && c.Value != "" {
			return c.Name + "=" + c.Value
		}
	}
	return ""
}

// do sends a request as the harness's user. Header pairs override the defaults; an empty
// value removes a header ("Authorization", "" sends none).
func (h *harness) do(method, path, body string, header ...string) response {
	h.t.Helper()
	return h.doWith(noRedirect, method, path, body, header...)
}

func (h *harness) doWith(c *http.Client, method, path, body string, header ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", h.user.basic())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		switch {
		case header[i] == "Host":
			req.Host = header[i+1]
		case header[i+1] == "":
			req.Header.Del(header[i])
		default:
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{code: res.StatusCode, header: res.Header, body: string(b)}
}

// signIn posts the sign-in form through c (nil: the default client).
func (h *harness) signIn(c *http.Client, role, password string) response {
	h.t.Helper()
	if c == nil {
		c = noRedirect
	}
	form := url.Values{"role": {role}, "password": {password}}.Encode()
	return h.doWith(c, "POST", "/login", form, "Authorization", "", "Content-Type", "application/x-www-form-urlencoded")
}

// session signs u in through the form and returns the session cookie.
func (h *harness) session(u user) string {
	h.t.Helper()
	r := h.signIn(nil, u.role, u.password)
	if r.code != http.StatusSeeOther || r.cookie() == "" {
		h.t.Fatalf("sign in as %s: %d %s", u.role, r.code, r.body)
	}
	return r.cookie()
}

var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// fromAddr is a client whose connections leave from local address ip (any of 127.0.0.0/8
// reaches the test server), so that the server sees another client address.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{
		Timeout:       30 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: noRedirect.CheckRedirect,
	}
}

// clock is a settable time for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// backends counts role's connections to the catalog opened by the API.
func (h *harness) backends(role string) int {
	h.t.Helper()
	var n int
	err := h.Client.Catalog().Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE usename = $1 AND datname = $2 AND application_name = 'deckhand api'`, role, h.DB).Scan(&n)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) get(path string) response { return h.do("GET", path, "") }

// mustGet fails the test unless path answers 200, and decodes the answer into v.
func (h *harness) mustGet(path string, v any) {
	h.t.Helper()
	r := h.get(path)
	if r.code != http.StatusOK {
		h.t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	if v != nil {
		r.json(h.t, v)
	}
}

// submit submits j as the harness's user.
func (h *harness) submit(j *spec.Job) int64 {
	h.t.Helper()
	id, err := h.user.client.Submit(ctx, j)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// sse reads a server-sent event stream.
type sse struct {
	res *http.Response
	r   *bufio.Reader
}

type sseEvent struct{ name, data string }

// events opens /api/events with the given Authorization or Cookie header (default: as the
// harness's user).
func (h *harness) events(header ...string) *sse {
	h.t.Helper()
	s, code := h.openEvents(header...)
	if code != http.StatusOK {
		h.t.Fatalf("GET /api/events: %d", code)
	}
	return s
}

// openEvents opens /api/events and returns the stream when it answered 200, else the status.
func (h *harness) openEvents(header ...string) (*sse, int) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+"/api/events", nil)
	req.Header.Set("Authorization", h.user.basic())
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		h.t.Logf("GET /api/events: %d %s", res.StatusCode, b)
		return nil, res.StatusCode
	}
	h.t.Cleanup(func() { res.Body.Close() })
	return &sse{res: res, r: bufio.NewReader(res.Body)}, res.StatusCode
}

// next returns the next event. The caller bounds the wait by closing the stream.
func (s *sse) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// waitFor reads events until match returns true, failing the test after timeout.
func (s *sse) waitFor(t *testing.T, timeout time.Duration, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { s.res.Body.Close() })
	defer timer.Stop()
	var seen []string
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("waiting for %s: %v (saw %v)", what, err, seen)
		}
		seen = append(seen, ev.name+" "+ev.data)
		if match(ev) {
			return ev
		}
	}
}

func sqlJob(desc, node string, sqls ...string) *spec.Job {
	j := &spec.Job{Description: desc}
	for i, s := range sqls {
		t := spec.Task{Name: string(rune('a' + i)), Node: node, SQL: s}
		if i > 0 {
			t.DependsOn = []string{string(rune('a' + i - 1))}
		}
		j.Tasks = append(j.Tasks, t)
	}
	return j
}

func noopJob(desc string, n int) *spec.Job {
	j := &spec.Job{Description: desc}
	for i := range n {
		j.Tasks = append(j.Tasks, spec.Task{Name: "t" + string(rune('a'+i)), Kind: spec.KindNoop})
	}
	return j
}

func (s *sse) close() { s.res.Body.Close() }

// worker runs an in-process worker whose metrics go to the harness's registry.
func (h *harness) worker() *engine.Worker {
	h.t.Helper()
	w, _ := h.Worker(engine.Config{Concurrency: 4, ShutdownGrace: 200 * time.Millisecond, Logger: quiet, Metrics: engine.NewMetrics(h.reg)})
	return w
}

// mustPassword is the password the test cluster gave role.
func mustPassword(t *testing.T, role string) string {
	t.Helper()
	pw, err := pgtest.Password(role)
	if err != nil {
		t.Fatal(err)
	}
	return pw
}
