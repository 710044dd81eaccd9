package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/deckhandhq/deckhand/api"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// While the catalog does not answer, a signed-in caller's requests are told so with 503, as
// the docs promise, rather than a 500 carrying the driver's connection error.
func TestCatalogOutageIs503(t *testing.T) {
	e, proxy, hs := serverBehindProxy(t)
	role := e.Role("ops")
	e.Exec("postgres", "GRANT deckhand_admin TO "+pgx.Identifier{role}.Sanitize())
	basic := user{role: role, password: mustPassword(t, role)}.basic()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", basic)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := do("GET", "/api/jobs", ""); code != http.StatusOK {
		t.Fatalf("GET /api/jobs: %d %s", code, body)
	}

	proxy.Close() // the catalog is gone: connections cut, new ones refused
	for _, r := range [][3]string{
		{"GET", "/api/jobs", ""},
		{"GET", "/api/jobs/1", ""},
		{"GET", "/api/nodes", ""},
		{"GET", "/api/exports", ""},
		{"POST", "/api/jobs", `{"tasks": [{"name": "a", "kind": "noop"}]}`},
		{"POST", "/api/jobs/1/cancel", ""},
	} {
		code, body := do(r[0], r[1], r[2])
		if code != http.StatusServiceUnavailable || strings.Count(body, "\n") != 1 || !strings.Contains(body, "the catalog did not answer") {
			t.Errorf("%s %s with the catalog down: %d %s, want 503 saying the catalog did not answer", r[0], r[1], code, body)
		}
	}
}

// serverBehindProxy is an API server whose catalog connections go through a proxy the test
// may close, to take the catalog away from it.
func serverBehindProxy(t *testing.T) (*testenv.Env, *pgtest.Proxy, *httptest.Server) {
	t.Helper()
	e := testenv.New(t)
	proxy := pgtest.ProxyTo(t, e.CatalogCluster)
	client, err := engine.Open(ctx, proxy.DSN(e.DB, pgcluster.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	srv, err := api.New(api.Config{Client: client, Registry: prometheus.NewRegistry(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return e, proxy, hs
}
