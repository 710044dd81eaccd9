package catalog

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Every claim statement, of every reduced set, runs after the node-locking statement of the
// same sets (walking the nodes, or looking at every one); it claims from its own sets when the
// node-locking statement found work in no other, and nothing when it did.
func TestEveryClaimStatementClaimsOnlyWhenItCoversTheWork(t *testing.T) {
	ctx := context.Background()
	cat := freshCatalog(t)
	execAll(t, cat.Pool,
		`INSERT INTO deckhand.node (name, dsn, node_group, role, max_tasks) VALUES
			('n1', 'host=/nonexistent', 'n1', 'primary', 4), ('g1-primary', 'host=/nonexistent', 'g1', 'primary', 4)`,
		`INSERT INTO deckhand.worker (id, name, concurrency, lease_expires_at) VALUES (1, 'w', 10, 'infinity')`,
		`INSERT INTO deckhand.job (id, description, kind, tasks_total) VALUES (1, 'work', 'sql', 4)`)
	task := map[claimSets]string{
		setAnywhere:     `INSERT INTO deckhand.task (job_id, name, kind, owner, max_attempts, timeout, state) VALUES (1, 'a', 'noop', 'app', 3, '1 hour', 'runnable')`,
		setNodes:        `INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state) VALUES (1, 'n', 'sql', 'n1', 'app', 'SELECT 1', 3, '1 hour', 'runnable')`,
		setCoordinators: `INSERT INTO deckhand.task (job_id, name, kind, node, owner, max_attempts, timeout, state) VALUES (1, 'e', 'export', 'n1', 'app', 3, '1 hour', 'runnable')`,
		setGroups:       `INSERT INTO deckhand.task (job_id, name, kind, node_group, min_lsn, owner, sql, max_attempts, timeout, state) VALUES (1, 'g', 'sql', 'g1', '0/0', 'app', 'SELECT 1', 3, '1 hour', 'runnable')`,
	}
	for work := claimSets(1); work <= allSets; work++ {
		for sets, stmt := range claimStatements {
			for _, walk := range []bool{false, true} {
				t.Run(fmt.Sprintf("work %04b statement %04b walk %v", work, sets, walk), func(t *testing.T) {
					tx, err := cat.Pool.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback(ctx) //nolint:errcheck
					execAll(t, tx, probesOnly)
					for set, sql := range task {
						if work&set != 0 {
							execAll(t, tx, sql)
						}
					}
					lock := lockStatements[sets&nodeBound].every
					if walk {
						lock = lockStatements[sets&nodeBound].walk
					}
					lockArgs, err := lock.argsOf(pgx.StrictNamedArgs{"start_node": "", "start_group": "", "limit": 10, "nodes": 10, "now": nil})
					if err != nil {
						t.Fatal(err)
					}
					var found int32
					if err := tx.QueryRow(ctx, lock.sql, lockArgs...).Scan(nil, nil, nil, nil, nil, &found); err != nil {
						t.Fatal(err)
					}
					if claimSets(found) != work {
						t.Fatalf("the node-locking statement found sets %04b, want %04b", found, work)
					}
					args, err := claimArgs(stmt, nil, 1, 10, nil, func() float64 { return 0.5 })
					if err != nil {
						t.Fatal(err)
					}
					rows, err := tx.Query(ctx, stmt.sql, args...)
					if err != nil {
						t.Fatal(err)
					}
					claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
						values, err := r.Values()
						if err != nil {
							return "", err
						}
						return values[2].(string), nil // name
					})
					if err != nil {
						t.Fatal(err)
					}
					if covers := work&^sets == 0; covers != (len(claimed) > 0) {
						t.Errorf("claimed %v; the statement covers the work: %v", claimed, covers)
					}
					if work&^sets == 0 && len(claimed) != countSets(work) {
						t.Errorf("claimed %v, want a task of each set in %04b", claimed, work)
					}
				})
			}
		}
	}
}

func countSets(s claimSets) int {
	n := 0
	for ; s != 0; s &= s - 1 {
		n++
	}
	return n
}
