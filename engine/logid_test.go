package engine_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// A worker declared dead registers anew under a new id; its log lines from then on name that
// id, the one deckhand.workers shows for it, not the one the catalog has marked stopped.
func TestLogNamesTheWorkerIDAfterALostLease(t *testing.T) {
	e := testenv.New(t)
	var out testenv.Buffer
	w, stop := e.Worker(engine.Config{LeaseTTL: time.Second,
		Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	first := w.ID()
	e.Exec(e.DB, `UPDATE deckhand.worker SET stopped_at = now() WHERE id = $1`, first)
	testenv.Eventually(t, 10*time.Second, func() bool { return w.ID() != first }, "the worker registers anew")
	stop()
	var last string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(line, "shutting down") {
			last = line
		}
	}
	if want := fmt.Sprintf("worker_id=%d", w.ID()); !strings.Contains(last, want) {
		t.Errorf("the worker is %d after its lost lease (was %d), but its shutdown logs %q", w.ID(), first, last)
	}
}
