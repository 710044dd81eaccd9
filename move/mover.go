package move

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// The steps of a move, in order, as deckhand.move_progress names them.
const (
	StepPlan      = "plan"      // read and check the source, the target and the placements
	StepStructure = "structure" // the schema's DDL on the target, without indexes and constraints but keys
	StepSlot      = "slot"      // publication and slot on the source, exporting a snapshot
	StepCopy      = "copy"      // the rows under the snapshot, tables in parallel
	StepIndexes   = "indexes"   // the other indexes and constraints on the target
	StepCatchUp   = "catch_up"  // the slot's changes applied on the target
	StepCutOver   = "cut_over"  // writes blocked, target caught up, source refuses writes
	StepSwitch    = "switch"    // the operation succeeded, the placement switched
	StepDone      = "done"
)

// Steps lists the steps of a move in order.
var Steps = []string{StepPlan, StepStructure, StepSlot, StepCopy, StepIndexes, StepCatchUp, StepCutOver, StepSwitch, StepDone}

// Mover runs move tasks; see the package documentation and docs/operations.md.
type Mover struct {
	Cleaner *cleanup.Cleaner
	// LeaveToCleaner skips removing resources inline after the move ends, leaving them all to
	// the cleaner (tests use it to exercise `deckhand cleanup run`).
	LeaveToCleaner bool
	// AfterStep, when set, is called after each step with its name; an error it returns ends
	// the attempt there (tests inject failures with it).
	AfterStep func(ctx context.Context, step string) error
	// Sleep waits between cut-over tries; nil: a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// CutOverTries bounds the cut-overs an attempt tries; 0: 30. Each blocks writers for at
	// most the move's --max-write-block, whatever the number.
	CutOverTries int
}

// endpoint is a node of a move: the primary of a group, and the owner's identity there.
type endpoint struct {
	node  deckhandtype.Node
	owner nodeconn.Owner
}

// Run performs one attempt of a move.
func (m Mover) Run(ctx context.Context, t *deckhandtype.ClaimedTask) (err error) {
	c := m.Cleaner
	p, err := ParsePayload(t.Payload)
	if err != nil {
		return taskerr.Permanent(err)
	}
	// An earlier attempt may have succeeded and died before switching the placement (or
	// before the engine heard of it): the move is done; finish the switch.
	if done, err := c.Catalog.SucceededOperationOfTask(ctx, t.ID); err != nil {
		return err
	} else if done != 0 {
		c.Log().Info("move: an earlier attempt already cut over; switching the placement", "task", t.ID, "operation", done)
		return c.Catalog.SwitchPlacement(ctx, t.JobID, p.objects(), p.To)
	}
	// Until the operation below begins (and settle takes over), an attempt that ends the task
	// frees the marks an earlier attempt of it left: a move refused on its retry (the name
	// found on another group since, a target taken) must not keep its objects from other
	// jobs for as long as its own job runs on (a rebalance's other moves).
	settling := false
	defer func() {
		if !settling && err != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			m.freeMarks(fctx, t, p, err)
		}
	}()
	src, err := m.endpoint(ctx, t, p.From)
	if err != nil {
		return err
	}
	dst, err := m.endpoint(ctx, t, p.To)
	if err != nil {
		return err
	}
	// An earlier attempt whose worker died may have left a backend on either node that
	// waits on something (a lock, CREATE_REPLICATION_SLOT waiting for a transaction) and so
	// has not noticed its client is gone. The leader terminates a dead attempt's backend for
	// tasks that name their node; a move names none, so it does it here, first.
	if err := m.endEarlierAttempts(ctx, t, src, dst); err != nil {
		return err
	}
	// An earlier attempt that died after the copy left a target, a slot and a publication
	// this one can keep: it resumes the catch-up where the target stands.
	if resumed, err := m.resume(ctx, t, p, src, dst); resumed || err != nil {
		settling = resumed // the resumed attempt settled itself
		return err
	}
	// What an earlier attempt of this task left (it failed, or its worker died) goes first:
	// a partial target, its slot and publication, the source's refusal of writes.
	if err := m.releaseHold(ctx, t); err != nil {
		return err
	}
	if err := c.RemoveLeftovers(ctx, t.ID, 10*time.Second); err != nil {
		return err
	}
	if err := m.step(ctx, t, StepPlan, 0); err != nil {
		return err
	}
	srcConn, releaseSrc, err := dedicated(src.owner, t)(ctx)
	if err != nil {
		return err
	}
	defer releaseSrc()
	dstConn, releaseDst, err := dedicated(dst.owner, t)(ctx)
	if err != nil {
		return err
	}
	defer releaseDst()
	pl, err := inspect(ctx, srcConn, p)
	if err != nil {
		return err
	}
	if err := awaitOldCopies(ctx, c.Catalog, dst.node.Name, p, pl, func(msg string) {
		c.Log().Info("move: "+msg, "task", t.ID)
	}); err != nil {
		return err
	}
	if err := targetTaken(ctx, dstConn, pl, p, dst.node.Name); err != nil {
		return err
	}
	if err := m.heldElsewhere(ctx, p); err != nil {
		return err
	}
	if err := c.Catalog.BeginMove(ctx, t.JobID, p.objects(), p.From, p.To); err != nil {
		if errors.Is(err, catalog.ErrAlreadyMoving) || errors.Is(err, catalog.ErrPlacedElsewhere) {
			return taskerr.Permanent(err)
		}
		return err
	}
	op, err := c.Begin(ctx, t, p.Description())
	if err != nil {
		return err
	}
	switched := false
	settling = true
	defer func() { m.settle(ctx, t, p, op, err, switched) }()
	// Slots are per server, and a server may serve several catalogs: the random part keeps
	// names of different catalogs' operations apart.
	name := fmt.Sprintf("deckhand_move_%d_%08x", op.ID(), rand.Uint32())
	mv := &move{Mover: m, t: t, p: p, pl: pl, op: op, src: src, dst: dst, srcConn: srcConn, dstConn: dstConn, name: name}
	if err := mv.run(ctx); err != nil {
		return err
	}
	switched = true
	return nil
}

// endpoint finds the primary of group and the owner's identity on it.
func (m Mover) endpoint(ctx context.Context, t *deckhandtype.ClaimedTask, group string) (endpoint, error) {
	nodes, err := m.Cleaner.Catalog.Nodes(ctx)
	if err != nil {
		return endpoint{}, err
	}
	members, primaries := deckhandtype.Primaries(nodes, group)
	if len(primaries) == 0 && len(members) == 1 {
		primaries = members // a group of one whose role the leader has not probed yet
	}
	switch {
	case len(members) == 0:
		return endpoint{}, refusal("node group %q has no nodes", group)
	case len(primaries) != 1:
		return endpoint{}, fmt.Errorf("node group %q has %d primaries", group, len(primaries))
	}
	n := primaries[0]
	return endpoint{node: n, owner: nodeconn.Owner{Node: n.Name, DSN: n.DSN, Role: t.Owner, Submitter: t.SubmittedBy}}, nil
}

// endEarlierAttemptsSQL ends the owner's backends that carry one of the application_names
// $1 (nodeconn.ApplicationName of the task's earlier attempts), waiting up to 5s for each, and
// returns those it could not end. A backend it could not signal may have ended meanwhile: a
// parallel worker ends with its leader, and a backend may notice its client is gone.
// stillRunningSQL counts, with a fresh view of the server's backends (a new statement, a new
// transaction), those that are still there. Both run in an owner session whose search_path
// is nodeconn.SafeSearchPath.
const (
	endEarlierAttemptsSQL = `
	SELECT pg_catalog.array_agg(a.pid) FILTER (WHERE NOT pg_catalog.pg_terminate_backend(a.pid, 5000::pg_catalog.int8))
	FROM pg_catalog.pg_stat_activity a
	WHERE a.application_name OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) AND a.usename OPERATOR(pg_catalog.=) SESSION_USER`
	stillRunningSQL = `
	SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a
	WHERE a.pid OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.int4[])
	  AND a.application_name OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) AND a.usename OPERATOR(pg_catalog.=) SESSION_USER`
)

// endEarlierAttempts terminates, on each node of the move, the backends that earlier
// attempts of the task left, so that none of them goes on waiting (and holding what it
// waits with) once this attempt runs. Only one attempt of a task runs at a time: the
// others' backends are leftovers. They are found by the exact names of the attempts the
// catalog records: task ids and tokens are numbered per catalog, and a server may serve
// several, whose tasks of the same id are not this task's.
func (m Mover) endEarlierAttempts(ctx context.Context, t *deckhandtype.ClaimedTask, ends ...endpoint) error {
	attempts, err := m.Cleaner.Catalog.Attempts(ctx, t.JobID, t.ID-1, t.ID)
	if err != nil {
		return err
	}
	var names []string
	for _, a := range attempts {
		if a.TaskID == t.ID && a.Token != t.Token {
			names = append(names, nodeconn.ApplicationName(t.ID, a.Token))
		}
	}
	if len(names) == 0 {
		return nil
	}
	for _, e := range ends {
		conn, release, err := dedicated(e.owner, t)(ctx)
		if err != nil {
			return err
		}
		var pids []int32
		left := 0
		err = conn.QueryRow(ctx, endEarlierAttemptsSQL, names).Scan(&pids)
		if err == nil && len(pids) > 0 {
			err = conn.QueryRow(ctx, stillRunningSQL, names, pids).Scan(&left)
		}
		release()
		if err != nil {
			return fmt.Errorf("end the backends of earlier attempts on node %s: %w", e.node.Name, err)
		}
		if left > 0 {
			return fmt.Errorf("%d backend(s) of an earlier attempt still run on node %s after terminate", left, e.node.Name)
		}
	}
	return nil
}

// step records that the move is at step name.
func (m Mover) step(ctx context.Context, t *deckhandtype.ClaimedTask, name string, tables int) error {
	return m.Cleaner.Catalog.SetMoveStep(ctx, t.ID, name, tables)
}

// settle ends an attempt's operation after the move returned err: failed (unless it already
// ended), the placements' marks of its objects cleared when the task will not retry, and the
// operation's due records removed unless they are left to the cleaner.
func (m Mover) settle(ctx context.Context, t *deckhandtype.ClaimedTask, p Payload, op *cleanup.Operation, err error, switched bool) {
	c := m.Cleaner
	if op.Ended() && err == nil {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if !op.Ended() {
		if ferr := op.Fail(fctx, err); ferr != nil {
			c.Log().Warn("move: could not record the failure; the cleaner will find the orphan", "operation", op.ID(), "err", ferr)
			return
		}
	}
	// This attempt did not die: what it made is not held for a later one.
	if herr := m.releaseHold(fctx, t); herr != nil {
		c.Log().Warn("move: could not release the hold on its resources; they go when the job ends", "job", t.JobID, "err", herr)
	}
	if !switched {
		m.freeMarks(fctx, t, p, err)
	}
	if !m.LeaveToCleaner {
		if _, rerr := op.RemoveDue(fctx, 0); rerr != nil {
			c.Log().Warn("move: removal after failure left work to the cleaner", "operation", op.ID(), "err", rerr)
		}
	}
}

// freeMarks clears the marks of the move's objects when the attempt, ended by err, ends the
// task (it will not retry): they are free for other moves. Only its own: the job's other moves
// (a rebalance's) still hold theirs.
func (m Mover) freeMarks(ctx context.Context, t *deckhandtype.ClaimedTask, p Payload, err error) {
	if taskerr.Retryable(err) && t.Attempts < t.MaxAttempts {
		return
	}
	if eerr := m.Cleaner.Catalog.EndMove(ctx, t.JobID, p.objects()...); eerr != nil {
		m.Cleaner.Log().Warn("move: could not clear the placements' marks", "job", t.JobID, "err", eerr)
	}
}
