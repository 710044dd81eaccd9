package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The dashboard's live stream comes back by itself. Cut, it is reconnected by the browser;
// that reconnect, and the next, answered 503 (after which a browser's EventSource gives up
// for good), the dashboard opens a new stream itself, shows live again, and job changes
// reach it.
func TestBrowserEventStreamReconnects(t *testing.T) {
	b := newBrowser(t, 1280, 800)
	h := newHarness(t)
	h.AddNode("n1", 4)
	h.worker()
	var refuse, streams atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/events" {
			streams.Add(1)
			if refuse.Add(-1) >= 0 {
				http.Error(w, "the server is restarting", http.StatusServiceUnavailable)
				return
			}
		}
		h.srv.Handler().ServeHTTP(w, r)
	}))
	// The browser is still open, its event stream with it: cut it, or Close waits for it.
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })

	b.signIn(hs.URL, h.user)
	b.waitJS("the live stream connects", `document.querySelector('#live.on') !== null`, 15*time.Second)
	before := streams.Load()
	refuse.Store(2)
	hs.CloseClientConnections()
	b.waitJS("the dashboard shows the stream lost", `document.querySelector('#live.off') !== null`, 10*time.Second)
	b.waitJS("the live stream is back", `document.querySelector('#live.on') !== null`, 30*time.Second)
	if n := streams.Load() - before; n < 3 {
		t.Errorf("%d stream requests since the cut, want at least 3: two refused, then one that succeeded", n)
	}

	id := h.submit(sqlJob("after the reconnect", "n1", "SELECT 1"))
	b.waitJS("a job submitted afterwards shows up finished", fmt.Sprintf(`document.querySelector('tr[data-job="%d"][data-state="finished"]') !== null`, id), 20*time.Second)
	// The refusals are reported by the browser; nothing else may be.
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		if !strings.Contains(e, "/api/events") && !strings.Contains(e, "503") {
			t.Errorf("the dashboard reported an error: %s", e)
		}
	}
}
