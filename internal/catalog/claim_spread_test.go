package catalog_test

import (
	"fmt"
	"slices"
	"testing"
)

// Concurrent claimers of one large job's tasks start at different places among them (the
// catalog's Rand), so that they do not all meet at its first tasks; priorities still hold: a
// later job's tasks come only once the earlier job has none left to give.
func TestClaimsSpreadOverAJobAndKeepPriorities(t *testing.T) {
	cat := migratedCatalog(t)
	exec := execOn(t, cat)
	exec(`INSERT INTO deckhand.worker (name, concurrency, lease_expires_at) VALUES ('w', 1000, 'infinity')`)
	for _, job := range []struct {
		prefix string
		key    string
	}{{"a", "now() - interval '1 minute'"}, {"b", "now()"}} {
		exec(`WITH j AS (INSERT INTO deckhand.job (description, kind, tasks_total) VALUES ($1, 'noop', 100) RETURNING id)
			INSERT INTO deckhand.task (job_id, name, kind, owner, sql, max_attempts, timeout, state, claim_key)
			SELECT j.id, $1 || lpad(i::text, 3, '0'), 'noop', 'app', '', 3, '1 hour', 'runnable', `+job.key+`
			FROM j, generate_series(0, 99) i ORDER BY i`, job.prefix)
	}
	claim := func(spread float64, limit int) []string {
		t.Helper()
		cat.Rand = func() float64 { return spread }
		claimed, err := cat.Claim(ctx, 1, limit)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range claimed {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names
	}
	names := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("%s%03d", prefix, i))
		}
		return out
	}

	if got, want := claim(0.5, 10), names("a", 50, 60); !slices.Equal(got, want) {
		t.Fatalf("a claim starting half way took %v, want %v", got, want)
	}
	if got, want := claim(0.5, 10), names("a", 60, 70); !slices.Equal(got, want) {
		t.Fatalf("the next claim starting half way took %v, want %v", got, want)
	}
	if got, want := claim(0, 5), names("a", 0, 5); !slices.Equal(got, want) {
		t.Fatalf("a claim starting at the first task took %v, want %v", got, want)
	}
	// From 90 % of the way (a095): up to the last, around from the first left, then the later
	// job's first tasks.
	want := slices.Concat(names("a", 5, 50), names("a", 70, 100), names("b", 0, 5))
	slices.Sort(want)
	if got := claim(0.9, 80); !slices.Equal(got, want) {
		t.Fatalf("a claim of 80 took %v, want every task left of the earlier job, then the later one's first: %v", got, want)
	}
}
