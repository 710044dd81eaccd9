package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// A catalog conninfo that reaches a standby (read-only) is refused with what to do, not only
// PostgreSQL's "cannot execute INSERT in a read-only transaction"; a conninfo naming both
// servers with target_session_attrs=read-write, as operations.md advises for a catalog with a
// standby, reaches the primary whichever is listed first.
func TestCatalogOnAStandbyIsExplained(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.New(t, pgcluster.Options{})
	if err := primary.CreateDatabase(ctx, "catalog"); err != nil {
		t.Fatal(err)
	}
	clitest.Run(t, primary.DSN("catalog", pgcluster.Superuser), "init")
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	onStandby := standby.DSN("catalog", pgcluster.Superuser)
	for _, args := range [][]string{
		{"init"},
		{"node", "add", "n1", "--dsn", "host=localhost dbname=shop"},
		{"serve"},
	} {
		code, _, stderr := clitest.Deckhand(t, onStandby, args...)
		if code == 0 || !strings.Contains(stderr, "read-only") || !strings.Contains(stderr, "target_session_attrs=read-write") {
			t.Errorf("deckhand %s on the standby: exit %d, %q; want a failure saying the catalog server is read-only and what to do",
				strings.Join(args, " "), code, stderr)
		}
	}
	both := fmt.Sprintf("host=%s,%s port=%d,%d dbname=catalog user=%s sslmode=disable target_session_attrs=read-write",
		standby.Host, primary.Host, standby.Port, primary.Port, pgcluster.Superuser)
	clitest.Run(t, both, "node", "add", "n1", "--dsn", "host=localhost dbname=shop")
}
