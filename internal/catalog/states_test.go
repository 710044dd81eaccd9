package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

// The state-machine tests run every statement of the catalog that moves a state from rows
// seeded (by catalogtest) in each state it may meet, and hold what it did to the tables of
// state.go: every state change it makes must be an edge the table says that statement takes,
// and every edge the table says a statement takes must be taken in one of its cases.

var ctx = context.Background()

// machines is one catalog, emptied before every case, with its clock stopped at now.
type machines struct {
	cat  *catalog.Catalog
	db   catalogtest.DB
	now  time.Time
	seen map[string]map[string]bool // statement → edges it was seen taking
}

func newMachines(t *testing.T) *machines {
	t.Helper()
	cat := migratedCatalog(t)
	m := &machines{cat: cat, db: cat.Pool, now: time.Now(), seen: map[string]map[string]bool{}}
	cat.Now = func() time.Time { return m.now }
	return m
}

// statement is the subtest of one statement: its cases, and the edges it must take.
type statement struct {
	m  *machines
	t  *testing.T
	by string
}

func (m *machines) statement(t *testing.T, by string) *statement {
	return &statement{m: m, t: t, by: by}
}

// step is one case of a statement, on a catalog that held nothing before it.
type step struct {
	*statement
	name string
}

// run runs a case: body seeds rows and runs the statement with do (or check).
func (s *statement) run(name string, body func(c *step)) {
	s.t.Helper()
	catalogtest.Reset(ctx, s.t, s.m.db)
	body(&step{statement: s, name: name})
}

// do runs the case's statement.
func (c *step) do(act func() error, refusals ...error) catalogtest.States {
	c.t.Helper()
	return c.check(c.by, act, refusals...)
}

// check runs act, a call of the statement by, and holds the state changes it made to the
// tables. act may fail only with one of refusals.
func (c *step) check(by string, act func() error, refusals ...error) catalogtest.States {
	c.t.Helper()
	before := catalogtest.Snapshot(ctx, c.t, c.m.db)
	if err := act(); err != nil && !isOneOf(err, refusals) {
		c.t.Errorf("%s: %s: %v", c.name, by, err)
	}
	after := catalogtest.Snapshot(ctx, c.t, c.m.db)
	compare(c, by, "task", catalog.TaskTransitions, before.Tasks, after.Tasks)
	compare(c, by, "job", catalog.JobTransitions, before.Jobs, after.Jobs)
	compare(c, by, "operation", catalog.OperationTransitions, before.Operations, after.Operations)
	compare(c, by, "cleanup record", catalog.CleanupTransitions, before.CleanupRecords, after.CleanupRecords)
	compare(c, by, "export", catalog.ExportTransitions, before.Exports, after.Exports)
	return after
}

func isOneOf(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// compare holds every row that act wrote to the table: rows it created or deleted have no
// edge to check.
func compare[S ~string](c *step, by, machine string, table []catalog.Transition[S], before, after map[int64]catalogtest.Versioned[S]) {
	c.t.Helper()
	for id, b := range before {
		a, ok := after[id]
		if !ok || a.Version == b.Version {
			continue
		}
		edge := edgeName(machine, b.State, a.State)
		if c.m.seen[by] == nil {
			c.m.seen[by] = map[string]bool{}
		}
		c.m.seen[by][edge] = true
		switch {
		case !catalog.Allowed(table, b.State, a.State):
			c.t.Errorf("%s: %s moved %s %d %s → %s: not an edge of the %s table", c.name, by, machine, id, b.State, a.State, machine)
		case b.State != a.State && !takenBy(table, by, b.State, a.State):
			c.t.Errorf("%s: %s moved %s %d %s → %s: the %s table does not say %s takes that edge",
				c.name, by, machine, id, b.State, a.State, machine, by)
		}
	}
}

func takenBy[S ~string](table []catalog.Transition[S], by string, from, to S) bool {
	for _, e := range table {
		if e.From == from && e.To == to && e.By == by {
			return true
		}
	}
	return false
}

func edgeName[S ~string](machine string, from, to S) string {
	return fmt.Sprintf("%s %s → %s", machine, from, to)
}

// promised reports the edges the tables say the statement takes that none of its cases took.
func (s *statement) promised() {
	s.t.Helper()
	promisedBy(s, "task", catalog.TaskTransitions)
	promisedBy(s, "job", catalog.JobTransitions)
	promisedBy(s, "operation", catalog.OperationTransitions)
	promisedBy(s, "cleanup record", catalog.CleanupTransitions)
	promisedBy(s, "export", catalog.ExportTransitions)
}

func promisedBy[S ~string](s *statement, machine string, table []catalog.Transition[S]) {
	s.t.Helper()
	for _, e := range table {
		if e.By == s.by && !s.m.seen[s.by][edgeName(machine, e.From, e.To)] {
			s.t.Errorf("the %s table says %s takes %s → %s (%s), but none of its cases did", machine, s.by, e.From, e.To, e.Why)
		}
	}
}

// The negated test of an active task holds for running and cancelling tasks, and for no other
// state: it names every other one.
func TestIsActiveHoldsForRunningAndCancellingAlone(t *testing.T) {
	cat := migratedCatalog(t)
	var states []string
	for _, s := range deckhandtype.TaskStates {
		states = append(states, string(s))
	}
	var active []string
	if err := cat.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(state ORDER BY state), '{}') FROM unnest($1::text[]) AS s(state)
		WHERE state`+catalog.IsActive, states).Scan(&active); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(active) != "[cancelling running]" {
		t.Errorf("the test holds for %v, want cancelling and running", active)
	}
}
