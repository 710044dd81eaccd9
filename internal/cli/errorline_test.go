package cli_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A catalog that refuses connections is tried with TLS and then without, and both attempts
// fail alike: the error line says so once.
func TestRefusedCatalogIsReportedOnce(t *testing.T) {
	code, stdout, stderr := clitest.Deckhand(t, "host=127.0.0.1 port=1 user=nobody dbname=nothing", "job", "list")
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("job list against a refused catalog: exit %d, stdout %q, stderr %q; want 1 and one line", code, stdout, stderr)
	}
	if n := strings.Count(stderr, "connection refused"); n != 1 {
		t.Errorf("the error line says %d times that the connection was refused, want once: %s", n, stderr)
	}
}
