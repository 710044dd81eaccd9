package schedule_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/testenv"
)

// From psql, deckhand.schedule_add keeps the caller's search_path with the spec, as `deckhand
// schedule add` does, so that the schedule's jobs read the names they name as the caller
// would: not the function's own search_path (pg_catalog, pg_temp), in which no table of the
// caller's is found.
func TestScheduleAddFromSQLKeepsTheCallersSearchPath(t *testing.T) {
	e := testenv.New(t)
	_, client := e.Submitter("pathsub")
	conn, err := client.Catalog().Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET search_path = shop, public`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT deckhand.schedule_add('paths', '{"tasks": [{"name": "t", "kind": "noop"}]}', every => '1 minute')`); err != nil {
		t.Fatal(err)
	}
	// A spec that names its own search_path keeps it.
	if _, err := conn.Exec(ctx, `SELECT deckhand.schedule_add('named', '{"search_path": "audit", "tasks": [{"name": "t", "kind": "noop"}]}', every => '1 minute')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET search_path`); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"paths": "shop, public", "named": "audit"} {
		var got string
		if err := conn.QueryRow(ctx, `SELECT spec ->> 'search_path' FROM deckhand.schedules WHERE name = $1`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("schedule %s: search_path %q, want %q", name, got, want)
		}
	}

	// The schedule's job carries it.
	clock := &fakeClock{}
	s := service(t, e, clock)
	t0 := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	clock.Set(t0)
	fireDue(t, s)
	clock.Set(t0.Add(time.Minute))
	fireDue(t, s)
	rs := runs(t, e, "paths")
	if len(rs) != 1 || rs[0].JobID == nil {
		t.Fatalf("firings: %+v", rs)
	}
	var path string
	if err := e.Client.Catalog().Pool.QueryRow(ctx, `SELECT search_path FROM deckhand.job WHERE id = $1`, *rs[0].JobID).Scan(&path); err != nil {
		t.Fatal(err)
	}
	if path != "shop, public" {
		t.Errorf("the scheduled job's search_path is %q, want %q", path, "shop, public")
	}
}
