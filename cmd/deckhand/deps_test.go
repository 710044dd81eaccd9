package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The deckhand binary must not link test code: package testing registers its flags and pulls
// in what only tests need, and the test harness (clusters shared by a test binary, the fault
// proxy, pgpass files for test roles) has no business in production. `deckhand demo` and
// `deckhand bench` start their clusters with internal/pgcluster, which imports no test code.
func TestBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	// Proof that the list is the binary's: an empty or wrong list would pass everything below.
	if !slices.Contains(deps, "github.com/deckhandhq/deckhand/internal/cli") {
		t.Fatalf("go list -deps does not list internal/cli; got %d packages", len(deps))
	}
	for _, dep := range deps {
		if isTestCode(dep) {
			t.Errorf("the deckhand binary links %s", dep)
		}
	}
}

func isTestCode(pkg string) bool {
	const module = "github.com/deckhandhq/deckhand/"
	switch {
	case pkg == "testing", strings.HasPrefix(pkg, "testing/"):
		return true
	case strings.HasPrefix(pkg, module+"internal/pgtest"), strings.HasPrefix(pkg, module+"internal/testenv"):
		return true
	}
	return false
}

func TestIsTestCode(t *testing.T) {
	for pkg, want := range map[string]bool{
		"testing":        true,
		"testing/fstest": true,
		"testingfoo":     false,
		"net/http":       false,
		"github.com/deckhandhq/deckhand/internal/pgtest":    true,
		"github.com/deckhandhq/deckhand/internal/testenv":   true,
		"github.com/deckhandhq/deckhand/internal/pgcluster": false,
	} {
		if got := isTestCode(pkg); got != want {
			t.Errorf("isTestCode(%q) = %v, want %v", pkg, got, want)
		}
	}
}
