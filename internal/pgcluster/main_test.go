package pgcluster_test

import (
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// The tests start their clusters through the test harness, whose Main stops them all at exit.
func TestMain(m *testing.M) { pgtest.Main(m) }
