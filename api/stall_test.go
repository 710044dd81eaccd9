package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A catalog that stops answering without closing anything (a stopped server, a network that
// drops packets) must not hold a caller's request for ever on the connection its session
// keeps: the request is answered 503 once the catalog has had its time.
func TestStalledCatalogIs503(t *testing.T) {
	e, proxy, hs := serverBehindProxy(t)
	role := e.Role("ops")
	e.Exec("postgres", "GRANT deckhand_admin TO "+pgx.Identifier{role}.Sanitize())
	basic := user{role: role, password: mustPassword(t, role)}.basic()
	do := func(path string) (int, string, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		req.Header.Set("Authorization", basic)
		began := time.Now()
		res, err := noRedirect.Do(req)
		if err != nil {
			return 0, err.Error(), time.Since(began)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), time.Since(began)
	}
	if code, body, _ := do("/api/jobs"); code != http.StatusOK {
		t.Fatalf("GET /api/jobs: %d %s", code, body)
	}
	proxy.Stall(true)
	defer proxy.Stall(false)
	for _, path := range []string{"/api/jobs", "/api/nodes"} {
		code, body, took := do(path)
		if code != http.StatusServiceUnavailable || took > 15*time.Second || !strings.Contains(body, "the catalog did not answer") {
			t.Errorf("GET %s with the catalog stalled: %d %s after %s, want 503 saying the catalog did not answer within 15s",
				path, code, strings.TrimSpace(body), took.Round(time.Millisecond))
		}
	}
}
