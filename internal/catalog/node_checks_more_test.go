package catalog_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

func threeNodes(t *testing.T, cat *catalog.Catalog) {
	t.Helper()
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.node (name, dsn, node_group, max_tasks) VALUES
		('a', 'host=/nonexistent', 'a', 4), ('evil', 'host=/nonexistent', 'evil', 4), ('c', 'host=/nonexistent', 'c', 4)`); err != nil {
		t.Fatal(err)
	}
}

func isChecked(t *testing.T, cat *catalog.Catalog, name string) bool {
	t.Helper()
	var checked bool
	if err := cat.Pool.QueryRow(ctx, `SELECT checked_at IS NOT NULL FROM deckhand.node WHERE name = $1`, name).Scan(&checked); err != nil {
		t.Fatal(err)
	}
	return checked
}

// A failed probe's message is whatever the node said: a node (or anything listening where its
// conninfo points) may answer the startup with an error in bytes that are not UTF-8. Its check
// is stored all the same, and so are those of the nodes in its batch.
func TestRecordNodeChecksTakesAnyMessage(t *testing.T) {
	cat := migratedCatalog(t)
	threeNodes(t, cat)
	checks := []catalog.NodeCheck{
		{Name: "a", Role: "primary", LSN: "0/10"},
		{Name: "evil", Err: errors.New("FATAL: r\xf4le \xff does not exist (SQLSTATE 28000)")},
		{Name: "c", Role: "standby", LSN: "0/20"},
	}
	passed, err := cat.RecordNodeChecks(ctx, checks)
	if err != nil {
		t.Errorf("RecordNodeChecks: %v (passed %d): one node's message failed the batch", err, len(passed))
	}
	for _, n := range []string{"a", "c"} {
		if !isChecked(t, cat, n) {
			t.Errorf("node %s: check not recorded because of node evil's message", n)
		}
	}
	if !isChecked(t, cat, "evil") {
		t.Error("node evil: its failed check was not recorded")
	}
	if err := cat.RecordNodeCheck(ctx, "evil", "", "", checks[1].Err); err != nil {
		t.Errorf("node evil, on its own: %v", err)
	}
}

// A check the catalog refuses (a WAL position pg_lsn does not take; the prober sends only
// positions it parsed, but the catalog does not rely on it) fails on its own: the batch's
// other checks are recorded one by one.
func TestRecordNodeChecksRecordsTheOthersWhenOneIsRefused(t *testing.T) {
	cat := migratedCatalog(t)
	threeNodes(t, cat)
	checks := []catalog.NodeCheck{
		{Name: "a", Role: "primary", LSN: "0/10"},
		{Name: "evil", Role: "primary", LSN: "000000000/0"},
		{Name: "c", Role: "standby", LSN: "0/20"},
	}
	skipped, err := cat.RecordNodeChecks(ctx, checks)
	if err == nil || !strings.Contains(err.Error(), "record check of node evil") || len(skipped) != 0 {
		t.Errorf("RecordNodeChecks = %v, %v; want evil's check refused, nothing skipped", skipped, err)
	}
	for _, n := range []string{"a", "c"} {
		if !isChecked(t, cat, n) {
			t.Errorf("node %s: check not recorded because of node evil's WAL position", n)
		}
	}
	if isChecked(t, cat, "evil") {
		t.Error("node evil: a check the catalog refused was recorded")
	}
}
