package cli_test

import (
	"testing"
)

// Admins change catalog-wide settings; submitters are refused in one line and change nothing.
func TestSettingCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want(t, e.run("setting", "set", "retention", "48h"), 0)
	if got := decode[map[string]string](t, e.run("setting", "list", "-o", "json")); got["retention"] != "48h" {
		t.Fatalf("settings after set: %v", got)
	}
	wantUsage(t, e.run("setting", "set", "Bad-Name", "x"), "lower-case word")
	wantUsage(t, e.run("setting", "set", "retention"), "expected NAME VALUE")

	submitter, _ := e.Submitter("setter")
	as := func(args ...string) result {
		return deckhand(t, "", append([]string{"--catalog", e.RoleDSN(submitter)}, args...)...)
	}
	wantUsage(t, as("setting", "set", "retention", "1s"), "may not change settings", "deckhand_admin")
	wantUsage(t, as("setting", "reset", "retention"), "may not change settings")

	want(t, e.run("setting", "reset", "retention"), 0)
	if got := decode[map[string]string](t, e.run("setting", "list", "-o", "json")); len(got) != 0 {
		t.Fatalf("settings after reset: %v", got)
	}
}
