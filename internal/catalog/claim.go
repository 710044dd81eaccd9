package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/jackc/pgx/v5"
)

// Claim takes up to limit runnable tasks for the worker, honouring every node's max_tasks
// and the global max_running_tasks setting. It runs as two statements in one transaction, sent
// in one round trip: the first locks some of the nodes that have work, about as many as the
// claim needs and never all of them (lockNodesSQL; SKIP LOCKED, so that claimers pass the
// nodes others hold); the second, with a fresh snapshot taken under those locks, counts what
// runs on them and claims within their free capacity. A single statement
// could not do this safely: its snapshot would predate the lock and miss a concurrent claim.
// The second takes only from the sets of tasks that had runnable work at the worker's last
// claim (claim, below): PostgreSQL sets up every part of a statement, used or not.
func (c *Catalog) Claim(ctx context.Context, workerID int64, limit int) ([]deckhandtype.ClaimedTask, error) {
	if limit <= 0 {
		return nil, nil
	}
	claimed, err := c.inClaimTx(ctx, workerID, limit, nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return claimed, nil
}

// probesOnly makes the planner reach rows through index probes alone, for the rest of the
// transaction. The catalog runs generic plans, made once per connection from the sizes and
// statistics of that moment; a plan made while a table was small (a hash join over a
// sequential scan, or a sequential scan per probe, being cheapest then) reads the whole table
// on every run once it has grown, until something invalidates the plan. Claims and
// completions touch a few rows through their keys: with sequential scans, hash and merge
// joins off, their one plan is nested loops over index probes, whatever the tables held.
const probesOnly = `SELECT pg_catalog.set_config('enable_seqscan', 'off', true), pg_catalog.set_config('enable_hashjoin', 'off', true),
	pg_catalog.set_config('enable_mergejoin', 'off', true)`

// orderedProbes keeps the claim's plans from bitmap scans, which read every entry that matches
// before the first row comes out: a walk's step asks for the least node above the last
// (ORDER BY ... LIMIT 1), which a bitmap scan and a sort would answer by reading every runnable
// task above it. The claim sets it after whatever the transaction ran first (a completion keeps
// its own plans), for its two statements.
const orderedProbes = `SELECT pg_catalog.set_config('enable_bitmapscan', 'off', true)`

// Ahead is what a worker asks a claim for beyond a node's free slots, by node name: tasks it
// claims ahead (ClaimedTask.Queued), to start in its own slots there as its tasks end. They are
// running, held by the worker, but hold none of the node's max_tasks slots until the
// completion that records the end of the task whose slot one took hands it over
// (Result.HandedTo). So a node's slots pass from task to task without waiting for a catalog
// round trip, and the node never runs more than its max_tasks. Ahead claims come after every
// claim into free slots, within the claim's limit.
type Ahead map[string]int

// inClaimTx runs a claim transaction in one round trip: BEGIN, whatever first queues, the node
// locks, the claim itself and COMMIT, then whatever after queues; on the connection kept for
// claims when it is free (claim_conn.go).
func (c *Catalog) inClaimTx(ctx context.Context, workerID int64, limit int, ahead Ahead, first, after func(*pgx.Batch)) ([]deckhandtype.ClaimedTask, error) {
	conn, release, err := c.acquireForClaim(ctx)
	if err != nil {
		return nil, err
	}
	claimed, err := c.claim(ctx, conn.Conn(), workerID, limit, ahead, first, after)
	if err != nil {
		leaveNoTx(ctx, conn)
		release(false)
		return nil, err
	}
	release(true)
	return claimed, nil
}

// claim runs a claim transaction whose claim statement takes from the sets the worker's claims
// found runnable work in lately (seenSets), or none when they found nothing: an idle worker's
// claims only lock and look. When the statement that locks the nodes finds work in a
// set left out, the claim statement claims nothing (claimInputs) and another transaction claims
// from the sets found, then from every set. Only a change of what is runnable (work after an
// idle spell, a first job of a new kind) costs the second transaction.
func (c *Catalog) claim(ctx context.Context, conn *pgx.Conn, workerID int64, limit int, ahead Ahead, first, after func(*pgx.Batch)) ([]deckhandtype.ClaimedTask, error) {
	sets := c.seenSets.recent(c.clock())
	var all []deckhandtype.ClaimedTask
	for try := 0; ; try++ {
		claimed, found, err := c.claimFrom(ctx, conn, sets, workerID, limit-len(all), ahead, first, after)
		if err != nil {
			return all, err
		}
		// What it claimed (nothing, when a set was left out) is the worker's whatever follows.
		all = append(all, claimed...)
		c.seenSets.note(found, c.clock())
		if found&^sets == 0 || len(all) >= limit {
			return all, nil
		}
		// first and after ran in the transaction before.
		first, after = nil, nil
		if sets = (sets | found).normalized(); try > 0 {
			sets = allSets
		}
	}
}

// clock is Now, or the machine's clock when Now is not set.
func (c *Catalog) clock() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// claimFrom runs one claim transaction in one round trip with the claim statement of sets (none
// when sets is empty), and returns what it claimed and the sets the node-locking statement
// found runnable work in.
func (c *Catalog) claimFrom(ctx context.Context, conn *pgx.Conn, sets claimSets, workerID int64, limit int, ahead Ahead, first, after func(*pgx.Batch)) ([]deckhandtype.ClaimedTask, claimSets, error) {
	var (
		claimed []deckhandtype.ClaimedTask
		found   int32
	)
	startNode, startGroup, manyNodes, err := c.claimStart(ctx, conn)
	if err != nil {
		return nil, 0, err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(probesOnly)
	if first != nil {
		first(b)
	}
	stmt, claims := claimStatements[sets]
	var args []any
	if claims {
		if args, err = claimArgs(stmt, c.now(), workerID, limit, ahead, c.random); err != nil {
			return nil, 0, err
		}
	}
	readSets := func(row pgx.Row) error { return row.Scan(nil, nil, nil, nil, nil, &found) }
	lock := lockStatements[sets.normalized()&nodeBound]
	if manyNodes {
		lockArgs, err := lock.walk.argsOf(pgx.StrictNamedArgs{"limit": limit, "nodes": min(limit, maxClaimNodes),
			"start_node": startNode, "start_group": startGroup, "now": c.now()})
		if err != nil {
			return nil, 0, err
		}
		b.Queue(orderedProbes)
		b.Queue(lock.walk.sql, lockArgs...).QueryRow(readSets)
	} else {
		lockArgs, err := lock.every.argsOf(pgx.StrictNamedArgs{"start_node": startNode})
		if err != nil {
			return nil, 0, err
		}
		b.Queue(lock.every.sql, lockArgs...).QueryRow(readSets)
	}
	if claims {
		b.Queue(stmt.sql, args...).Query(func(rows pgx.Rows) error {
			var err error
			claimed, err = pgx.CollectRows(rows, pgx.RowToStructByName[deckhandtype.ClaimedTask])
			return err
		})
	}
	b.Queue("COMMIT")
	if after != nil {
		after(b)
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, 0, err
	}
	return claimed, claimSets(found), nil
}

// claimArgs are stmt's arguments: those of every claim statement, and those of the sets it
// takes from (where the anywhere part starts, what the worker asks for ahead on nodes).
func claimArgs(stmt named, now *time.Time, workerID int64, limit int, ahead Ahead, random func() float64) ([]any, error) {
	named := pgx.StrictNamedArgs{"limit": limit, "now": now, "worker": workerID}
	if stmt.uses("spread") {
		named["spread"] = random()
	}
	if stmt.uses("ahead_nodes") {
		aheadNodes, aheadCounts := make([]string, 0, len(ahead)), make([]int32, 0, len(ahead))
		for node, n := range ahead {
			if n > 0 {
				aheadNodes, aheadCounts = append(aheadNodes, node), append(aheadCounts, int32(n))
			}
		}
		named["ahead_nodes"], named["ahead_counts"] = aheadNodes, aheadCounts
	}
	return stmt.args(named)
}
