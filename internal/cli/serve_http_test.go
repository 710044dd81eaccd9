package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func TestServeRefusesABadHTTPAddress(t *testing.T) {
	wantUsage(t, deckhand(t, "", "serve", "--catalog", "host=/nonexistent", "--http", "8080"), "HOST:PORT")
}

func TestServeHTTP(t *testing.T) {
	e := newEnv(t)
	alice := e.Role("alice")
	q := pgx.Identifier{alice}.Sanitize()
	e.Exec("postgres", "GRANT deckhand_submitter TO "+q)
	e.Exec(e.DB, `GRANT USAGE ON SCHEMA deckhand TO `+q+`; GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA deckhand TO `+q+`;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA deckhand TO `+q)
	t.Cleanup(func() { _ = e.Cluster.Exec(context.Background(), e.DB, "DROP OWNED BY "+q) })
	password, err := pgtest.Password(alice)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("DECKHAND_HTTP_TOKEN", "serve-test-token-0123456789")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr testenv.Buffer
	go func() {
		done <- cli.Main(ctx, []string{"--catalog", e.DSN, "serve", "--concurrency", "2", "--http", addr,
			"--maintenance-interval", "100ms", "--shutdown-grace", "1s"}, strings.NewReader(""), io.Discard, &stderr)
	}()
	call := func(method, path, body string, auth func(*http.Request)) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != nil {
			auth(req)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	token := func(r *http.Request) { r.Header.Set("Authorization", "Bearer serve-test-token-0123456789") }
	asAlice := func(r *http.Request) { r.SetBasicAuth(alice, password) }
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := call("GET", "/healthz", "", nil); return code == http.StatusOK }, "/healthz is 200")
	if code, _ := call("GET", "/api/jobs", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /api/jobs without credentials: %d, want 401", code)
	}
	if code, _ := call("GET", "/api/jobs", "", func(r *http.Request) { r.SetBasicAuth(alice, "wrong") }); code != http.StatusUnauthorized {
		t.Errorf("GET /api/jobs with a wrong password: %d, want 401", code)
	}
	code, body := call("POST", "/api/jobs", `{"tasks": [{"name": "a", "kind": "noop"}]}`, asAlice)
	var created struct{ ID int64 }
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &created) != nil {
		t.Fatalf("POST /api/jobs as %s: %d %s", alice, code, body)
	}
	if j := e.Wait(created.ID, 20*time.Second); j.SubmittedBy != alice {
		t.Errorf("job submitted through serve --http: submitted_by %q, want %q", j.SubmittedBy, alice)
	}
	if code, _ := call("GET", "/metrics", "", asAlice); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token from the environment: %d, want 401", code)
	}
	code, body = call("GET", "/metrics", "", token)
	for _, want := range []string{"deckhand_leader 1", `deckhand_jobs{state="finished"} 1`, "deckhand_api_sessions", "go_goroutines", "process_cpu_seconds_total"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if code, _ := call("GET", "/healthz", "", nil); code != 0 {
		t.Errorf("the HTTP server still answers after serve stopped")
	}
	if strings.Contains(stderr.String(), password) {
		t.Errorf("serve logged alice's password:\n%s", stderr.String())
	}
}
