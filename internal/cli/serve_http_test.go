package cli_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

func TestServeRefusesToExposeTheAPIWithoutAToken(t *testing.T) {
	t.Setenv("DECKHAND_HTTP_TOKEN", "")
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080"} {
		r := deckhand(t, "", "serve", "--catalog", "host=/nonexistent", "--http", addr)
		wantUsage(t, r, "--http "+addr, "DECKHAND_HTTP_TOKEN")
	}
	wantUsage(t, deckhand(t, "", "serve", "--catalog", "host=/nonexistent", "--http", "8080"), "HOST:PORT")
}

func TestServeHTTP(t *testing.T) {
	e := newEnv(t)
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
	get := func(path string, token bool) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if token {
			req.Header.Set("Authorization", "Bearer serve-test-token-0123456789")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := get("/healthz", false); return code == http.StatusOK }, "/healthz is 200")
	if code, _ := get("/api/jobs", false); code != http.StatusUnauthorized {
		t.Errorf("GET /api/jobs without the token from the environment: %d, want 401", code)
	}
	code, body := get("/metrics", true)
	for _, want := range []string{"deckhand_leader 1", `deckhand_jobs{state="finished"}`, "go_goroutines", "process_cpu_seconds_total"} {
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
	if code, _ := get("/healthz", false); code != 0 {
		t.Errorf("the HTTP server still answers after serve stopped")
	}
}
