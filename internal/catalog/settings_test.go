package catalog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The catalog accepts a duration setting exactly when the workers read it as the duration it
// says: retention and cleanup_lock_timeout are read with time.ParseDuration and taken only
// when positive, so a value the catalog accepts but a worker reads as 0 would be silently
// replaced by the default; the cleaner sets cleanup_lock_timeout as a lock_timeout of whole
// milliseconds, at most PostgreSQL's 2147483647. (A sign and the micro-sign spellings are
// refused, as documented.)
func TestDurationSettingsAreWhatWorkersRead(t *testing.T) {
	ctx := context.Background()
	cat := migratedCatalog(t)
	for _, v := range []string{
		"168h", "1h30m", "200ms", "1.5h", ".5s", "1.s", "1ns", "1us", "2562047h",
		"0.5ns", "0.9ns", "0.5ns0.5ns", "0.0001us", "0.000000000001s", "0s", "0", "1x", "", "h", ".s",
		"1.0000001ns", "0.001us", "0.0000001ms", "999ns1ns", "2147483647ms", "2147483647.9ms", "2147483648ms",
		"2562047h47m16.854775807s", "2562047h47m16.854775808s", strings.Repeat("0", 990) + "1s",
	} {
		for _, name := range []string{"retention", "cleanup_lock_timeout"} {
			err := cat.SetSetting(ctx, name, v)
			if v == "" { // resets
				continue
			}
			d, perr := time.ParseDuration(v)
			goTakes := perr == nil && d > 0
			if name == "cleanup_lock_timeout" && d.Milliseconds() > 2147483647 {
				goTakes = false
			}
			if (err == nil) != goTakes {
				t.Errorf("setting %s %q: catalog err = %v, but workers read it as %v (err %v)", name, v, err, d, perr)
			}
			if err != nil && !strings.Contains(err.Error(), "not a positive duration") {
				t.Errorf("setting %s %q: err = %v, want the one-line refusal", name, v, err)
			}
		}
	}
	// The function that reads durations is the catalog's own, like its other helpers.
	var public bool
	if err := cat.Pool.QueryRow(ctx, `SELECT has_function_privilege('public', 'deckhand.go_duration_ms(text)', 'EXECUTE')`).Scan(&public); err != nil {
		t.Fatal(err)
	}
	if public {
		t.Error("deckhand.go_duration_ms(text) is executable by PUBLIC")
	}
}

// A catalog upgraded with a value stored before set_setting checked values — a
// max_running_tasks of 'abc' makes every claim fail, so that no worker runs anything — keeps no
// such value: the upgrade removes what no worker can read (back to the default), keeps what
// workers read in the spelling set_setting takes (' 5' was a limit of 5, '+90s' 90 seconds),
// and keeps the rest.
func TestUpgradeKeepsNoSettingValueWorkersCannotRead(t *testing.T) {
	ctx := context.Background()
	cat, _, _ := emptyCatalog(t)
	if _, err := cat.MigrateTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Pool.Exec(ctx, `INSERT INTO deckhand.setting (name, value) VALUES
		('max_running_tasks', 'abc'), ('retention', '1x'), ('cleanup_lock_timeout', '900h'),
		('api_max_event_streams', '10'), ('export_destinations', 'file:///x')`); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _ := cat.Pool.Query(ctx, `SELECT name || '=' || value FROM deckhand.setting ORDER BY name`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api_max_event_streams=10", "export_destinations=file:///x"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("settings after the upgrade = %v, want %v", got, want)
	}

	cat2, _, _ := emptyCatalog(t)
	if _, err := cat2.MigrateTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := cat2.Pool.Exec(ctx, `INSERT INTO deckhand.setting (name, value) VALUES
		('max_running_tasks', ' 5 '), ('api_max_event_streams', '+7'), ('retention', '+90s'),
		('cleanup_lock_timeout', '5µs')`); err != nil {
		t.Fatal(err)
	}
	if _, err := cat2.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _ = cat2.Pool.Query(ctx, `SELECT name || '=' || value FROM deckhand.setting ORDER BY name`)
	if got, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := []string{"api_max_event_streams=7", "cleanup_lock_timeout=5us", "max_running_tasks=5", "retention=90s"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("settings after the upgrade = %v, want %v", got, want)
	}
}
