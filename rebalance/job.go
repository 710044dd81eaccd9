package rebalance

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/move"
	"github.com/deckhandhq/deckhand/spec"
)

// JobKind labels the jobs of rebalances: `deckhand rebalance status` shows the latest.
const JobKind = "rebalance"

// TaskName is the name of the i-th move (from 0) of a rebalance's job.
func TaskName(i int) string { return fmt.Sprintf("move-%d", i+1) }

// Job is the job of a rebalance: one move task per step, each waiting for the steps it depends
// on, all run as owner (empty: the submitter). The planned bytes travel in each move's payload.
func Job(groups []string, steps []Step, owner string) (*spec.Job, error) {
	if len(steps) == 0 {
		return nil, spec.Invalidf("nothing to move")
	}
	job := &spec.Job{Kind: JobKind,
		Description: fmt.Sprintf("rebalance groups %s: %d moves", strings.Join(groups, ", "), len(steps))}
	for i, s := range steps {
		// The name goes quoted: move reads names as PostgreSQL does, and sizing found this
		// one exactly as stored.
		t, err := move.Request{Schema: pgx.Identifier{s.Schema}.Sanitize(), From: s.From, To: s.To,
			Owner: owner, Bytes: s.Bytes}.Task(TaskName(i))
		if err != nil {
			return nil, fmt.Errorf("move of schema %s: %w", s.Schema, err)
		}
		for _, d := range s.DependsOn {
			t.DependsOn = append(t.DependsOn, TaskName(d))
		}
		job.Tasks = append(job.Tasks, t)
	}
	return job, nil
}
