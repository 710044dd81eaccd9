package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a catalog with the API served over HTTP in front of it.
type harness struct {
	*testenv.Env
	t     *testing.T
	srv   *api.Server
	http  *httptest.Server
	reg   *prometheus.Registry
	token string
}

type option func(*api.Config)

func withToken(tok string) option { return func(c *api.Config) { c.Token = tok } }

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	e := testenv.New(t)
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
	return &harness{Env: e, t: t, srv: srv, http: hs, reg: reg, token: cfg.Token}
}

// worker runs an in-process worker whose metrics go to the harness's registry.
func (h *harness) worker() *engine.Worker {
	h.t.Helper()
	w, _ := h.Worker(engine.Config{Concurrency: 4, ShutdownGrace: 200 * time.Millisecond, Logger: quiet, Metrics: engine.NewMetrics(h.reg)})
	return w
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

// do sends a request with the harness's token, if it has one.
func (h *harness) do(method, path, body string, header ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{code: res.StatusCode, header: res.Header, body: string(b)}
}

var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
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

func (h *harness) submit(j *spec.Job) int64 {
	h.t.Helper()
	id, err := h.Client.Submit(ctx, j)
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

func (h *harness) events() *sse {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+"/api/events", nil)
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		h.t.Fatalf("GET /api/events: %d", res.StatusCode)
	}
	h.t.Cleanup(func() { res.Body.Close() })
	return &sse{res: res, r: bufio.NewReader(res.Body)}
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
