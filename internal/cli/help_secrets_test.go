package cli_test

import (
	"strings"
	"testing"
)

// --help must not print the catalog conninfo of the environment, which may hold a password
// (pasted into a CI log, a ticket, a terminal recording); it printed it as the --catalog
// flag's default in every command's help.
func TestHelpDoesNotPrintTheCatalogConninfo(t *testing.T) {
	t.Setenv("DECKHAND_CATALOG", "host=db1 dbname=deckhand user=ops password=s3cr3t")
	for _, args := range [][]string{{"--help"}, {"job", "list", "--help"}, {"schedule", "add", "--help"}, {"job"}} {
		r := deckhand(t, "", args...)
		want(t, r, 0)
		if strings.Contains(r.stdout+r.stderr, "s3cr3t") || strings.Contains(r.stdout+r.stderr, "host=db1") {
			t.Errorf("deckhand %v prints the catalog conninfo:\n%s", args, r.stdout)
		}
		if !strings.Contains(r.stdout, "env DECKHAND_CATALOG") {
			t.Errorf("deckhand %v no longer names DECKHAND_CATALOG:\n%s", args, r.stdout)
		}
	}
}
