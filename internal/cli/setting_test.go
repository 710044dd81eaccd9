package cli_test

import (
	"strings"
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

	// The values of the settings deckhand reads are checked: a max_running_tasks that is not a
	// number would make every claim fail, a bad duration would be replaced by the default.
	for _, bad := range [][]string{
		{"max_running_tasks", "abc", "not a whole number"},
		{"max_running_tasks", "3000000000", "not a whole number"},
		{"api_max_event_streams", "ten", "not a whole number"},
		{"retention", "1x", "not a positive duration"},
		{"retention", "0s", "not a positive duration"},
		{"cleanup_lock_timeout", "0", "not a positive duration"},
		{"cleanup_lock_timeout", "900h", "at most 2147483647ms"},
	} {
		wantUsage(t, e.run("setting", "set", bad[0], bad[1]), "setting "+bad[0], bad[2])
	}
	if got := decode[map[string]string](t, e.run("setting", "list", "-o", "json")); len(got) != 1 {
		t.Fatalf("settings after refused values: %v", got)
	}
	for _, ok := range [][]string{
		{"max_running_tasks", "50"}, {"max_running_tasks", "0"}, {"api_max_event_streams", "10"},
		{"cleanup_lock_timeout", "1m30s"}, {"cleanup_lock_timeout", "200ms"}, {"retention", "1.5h"},
		{"custom_setting", "any text"}, {"retention", "48h"},
	} {
		want(t, e.run("setting", "set", ok[0], ok[1]), 0)
	}
	// A name deckhand does not read is stored, with a note that says so and what was likely
	// meant; deckhand's own names get none.
	r := e.run("setting", "set", "max_runing_tasks", "5")
	want(t, r, 0)
	if !strings.Contains(r.stderr, "max_runing_tasks is not a setting deckhand reads") || !strings.Contains(r.stderr, "did you mean max_running_tasks?") {
		t.Errorf("setting a misspelt name: stderr %q, want a note suggesting max_running_tasks", r.stderr)
	}
	if r := e.run("setting", "set", "retention", "48h"); strings.Contains(r.stderr, "note") {
		t.Errorf("setting retention: stderr %q, want no note", r.stderr)
	}
	want(t, e.run("setting", "reset", "max_runing_tasks"), 0)
	for _, name := range []string{"max_running_tasks", "api_max_event_streams", "cleanup_lock_timeout", "custom_setting"} {
		want(t, e.run("setting", "reset", name), 0)
	}

	submitter, _ := e.Submitter("setter")
	as := func(args ...string) result {
		return deckhand(t, "", append([]string{"--catalog", e.RoleDSN(submitter)}, args...)...)
	}
	wantUsage(t, as("setting", "set", "retention", "1s"), "may not change settings", "deckhand_admin")
	wantUsage(t, as("setting", "reset", "retention"), "may not change settings")
	// Reading them is refused the same way, not with PostgreSQL's "permission denied for table".
	wantUsage(t, as("setting", "list"), submitter+" may not read settings", "deckhand_admin")
	wantUsage(t, as("setting", "list", "-o", "json"), "may not read settings")

	want(t, e.run("setting", "reset", "retention"), 0)
	if got := decode[map[string]string](t, e.run("setting", "list", "-o", "json")); len(got) != 0 {
		t.Fatalf("settings after reset: %v", got)
	}
}
