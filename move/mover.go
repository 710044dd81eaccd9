package move

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/logicalapply"
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
	// What an earlier attempt of this task left (it failed, or its worker died) goes first:
	// a partial target, its slot and publication, the source's refusal of writes.
	if err := c.RemoveLeftovers(ctx, t.ID, 10*time.Second); err != nil {
		return err
	}
	src, err := m.endpoint(ctx, t, p.From)
	if err != nil {
		return err
	}
	dst, err := m.endpoint(ctx, t, p.To)
	if err != nil {
		return err
	}
	if err := m.step(ctx, t, StepPlan, 0); err != nil {
		return err
	}
	srcConn, releaseSrc, err := c.Pools.Session(ctx, src.owner, t)
	if err != nil {
		return err
	}
	defer releaseSrc()
	dstConn, releaseDst, err := c.Pools.Session(ctx, dst.owner, t)
	if err != nil {
		return err
	}
	defer releaseDst()
	pl, err := inspect(ctx, srcConn, p)
	if err != nil {
		return err
	}
	if err := targetTaken(ctx, dstConn, pl, p, dst.node.Name); err != nil {
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
	defer func() {
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
		if !switched && (!taskerr.Retryable(err) || t.Attempts >= t.MaxAttempts) {
			// The job will not retry: its objects are free for other moves.
			if eerr := c.Catalog.EndMove(fctx, t.JobID); eerr != nil {
				c.Log().Warn("move: could not clear the placements' marks", "job", t.JobID, "err", eerr)
			}
		}
		if !m.LeaveToCleaner {
			if _, rerr := op.RemoveDue(fctx, 0); rerr != nil {
				c.Log().Warn("move: removal after failure left work to the cleaner", "operation", op.ID(), "err", rerr)
			}
		}
	}()
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
	var members, primaries []deckhandtype.Node
	for _, n := range nodes {
		if n.Group == group {
			members = append(members, n)
			if n.Role == "primary" {
				primaries = append(primaries, n)
			}
		}
	}
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

// step records that the move is at step name.
func (m Mover) step(ctx context.Context, t *deckhandtype.ClaimedTask, name string, tables int) error {
	return m.Cleaner.Catalog.SetMoveStep(ctx, t.ID, name, tables)
}

// move is one attempt's state.
type move struct {
	Mover
	t                *deckhandtype.ClaimedTask
	p                Payload
	pl               *plan
	op               *cleanup.Operation
	src, dst         endpoint
	srcConn, dstConn *pgx.Conn
	name             string // of the slot, the publication, the scratch schema
}

// afterStep is the fault hook of test builds (see faults_faultinject.go); nil otherwise.
var afterStep func(step string)

func (mv *move) at(ctx context.Context, step string) error {
	if err := mv.step(ctx, mv.t, step, len(mv.pl.tables)); err != nil {
		return err
	}
	if afterStep != nil {
		afterStep(step)
	}
	if mv.AfterStep != nil {
		return mv.AfterStep(ctx, step)
	}
	return nil
}

func (mv *move) session(o nodeconn.Owner) sessionFunc {
	return func(ctx context.Context) (*pgx.Conn, func(), error) {
		return mv.Cleaner.Pools.Session(ctx, o, mv.t)
	}
}

func (mv *move) run(ctx context.Context) error {
	c, op, pl, p := mv.Cleaner, mv.op, mv.pl, mv.p
	srcNode, dstNode := mv.src.node.Name, mv.dst.node.Name

	// 1. Structure, taken with pg_dump as the owner. What the target gets is removed if the
	// move fails (a retry's Register removes what an earlier attempt left first).
	dir, err := os.MkdirTemp("", "deckhand-move-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := dumpStructure(ctx, dumpProgram{dsn: nodeconn.WithUser(mv.src.owner.DSN, mv.src.owner.Role),
		appName: nodeconn.ApplicationName(mv.t.ID, mv.t.Token), dir: dir}, pl, p)
	if err != nil {
		return fmt.Errorf("dump the structure: %w", err)
	}
	if p.Schema != "" {
		if _, err := op.Register(ctx, cleanup.SchemaCascade(dstNode, p.Schema), cleanup.OnFailure); err != nil {
			return err
		}
	} else {
		for _, r := range pl.published() {
			if _, err := op.Register(ctx, cleanup.Table(dstNode, r.Schema, r.Name), cleanup.OnFailure); err != nil {
				return err
			}
		}
	}
	ddl := mv.session(mv.dst.owner)
	if err := runScripts(ctx, ddl, st.preData, st.keys); err != nil {
		return fmt.Errorf("create the structure on the target: %w", err)
	}
	if err := refuseOthersCode(ctx, mv.dstConn, pl); err != nil {
		return err
	}
	if err := mv.at(ctx, StepStructure); err != nil {
		return err
	}

	// 2. Publication and slot; the slot's snapshot is what the copy reads.
	pub := pgx.Identifier{mv.name}.Sanitize()
	if _, err := op.Register(ctx, cleanup.Publication(srcNode, mv.name), cleanup.Always); err != nil {
		return err
	}
	published := make([]string, 0, len(pl.tables))
	for _, r := range pl.published() {
		published = append(published, r.ident())
	}
	if _, err := mv.srcConn.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+joinComma(published)+
		" WITH (publish_via_partition_root = true)"); err != nil {
		return fmt.Errorf("create the publication: %w", err)
	}
	if _, err := op.Register(ctx, cleanup.ReplicationSlot(srcNode, mv.name), cleanup.Always); err != nil {
		return err
	}
	repl, err := replicationConn(ctx, mv.src.owner, mv.t)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background()) //nolint:errcheck
	snapshot, start, err := createSlot(ctx, repl, mv.name)
	if err != nil {
		return fmt.Errorf("create the replication slot: %w", err)
	}
	if err := mv.at(ctx, StepSlot); err != nil {
		return err
	}

	// 3. Copy, as many tables at a time as both nodes take tasks.
	parallel := max(1, min(mv.src.node.MaxTasks, mv.dst.node.MaxTasks))
	err = copyTables(ctx, mv.session(mv.src.owner), mv.session(mv.dst.owner), snapshot, pl.copied(), parallel,
		func(_ relation, rows int64) {
			if err := c.Catalog.RecordMoveCopied(ctx, mv.t.ID, rows); err != nil {
				c.Log().Warn("move: could not record copy progress", "task", mv.t.ID, "err", err)
			}
		})
	if err != nil {
		return err
	}
	if err := mv.at(ctx, StepCopy); err != nil {
		return err
	}
	if err := runScripts(ctx, ddl, st.postData); err != nil {
		return fmt.Errorf("create indexes and constraints on the target: %w", err)
	}
	if err := mv.at(ctx, StepIndexes); err != nil {
		return err
	}

	// 4. Catch-up: the slot's changes applied on the target, with the applied position kept
	// on the target (scratch schema of the move) and in the catalog.
	scratch := pgx.Identifier{mv.name, "progress"}
	if _, err := op.Register(ctx, cleanup.SchemaCascade(dstNode, mv.name), cleanup.Always); err != nil {
		return err
	}
	if err := logicalapply.EnsureProgressTable(ctx, mv.dstConn, scratch); err != nil {
		return err
	}
	applyConn, releaseApply, err := mv.session(mv.dst.owner)(ctx)
	if err != nil {
		return err
	}
	defer releaseApply()
	applier := logicalapply.New(logicalapply.Config{
		Source: repl, Slot: mv.name, Publication: mv.name, Target: applyConn, ProgressTable: scratch,
		Applied: func(ctx context.Context, lsn pglogrepl.LSN) error {
			return c.Catalog.RecordMoveApplied(ctx, mv.t.ID, lsn.String())
		},
		Logger: c.Log(),
	})
	actx, stopApply := context.WithCancel(ctx)
	applied := make(chan error, 1)
	go func() { applied <- applier.Run(actx, start) }()
	defer func() {
		stopApply()
		<-applied
	}()
	waitFor := func(ctx context.Context, lsn pglogrepl.LSN) error {
		done := make(chan error, 1)
		go func() { done <- applier.WaitApplied(ctx, lsn) }()
		select {
		case err := <-done:
			return err
		case err := <-applied:
			applied <- err // for the deferred wait
			if err == nil {
				err = errors.New("the applier stopped")
			}
			return fmt.Errorf("catch-up: %w", err)
		}
	}
	if err := mv.at(ctx, StepCatchUp); err != nil {
		return err
	}

	// 5. Cut-over. What the source refuses writes with is removed if the move fails after
	// all; once it succeeds, the source goes as a deferred drop, once no query uses it.
	refusalFn := fmt.Sprintf("deckhand_moved_by_job_%d", mv.t.JobID)
	for _, s := range pl.schemas {
		if _, err := op.Register(ctx, cleanup.Function(srcNode, s, refusalFn), cleanup.OnFailure); err != nil {
			return err
		}
	}
	if p.Schema != "" {
		if _, err := op.Register(ctx, cleanup.SchemaCascade(srcNode, p.Schema), cleanup.DeferredOnSuccess); err != nil {
			return err
		}
	} else {
		for _, r := range pl.published() {
			if _, err := op.Register(ctx, cleanup.Table(srcNode, r.Schema, r.Name), cleanup.DeferredOnSuccess); err != nil {
				return err
			}
		}
	}
	sleep := mv.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	co := &cutOver{src: mv.srcConn, dst: mv.dstConn, pl: pl, st: st, budget: p.maxWriteBlock(), refusal: refusalFn,
		message: "pg_catalog.format('relation %I.%I moved to group %s by job %s: write to it there', TG_TABLE_SCHEMA, TG_TABLE_NAME, " +
			literal(p.To) + ", " + literal(strconv.FormatInt(mv.t.JobID, 10)) + ")",
		waitFor: waitFor, log: c.Log().Info, sleep: sleep}
	blocked, err := co.run(ctx)
	if err != nil {
		return fmt.Errorf("cut-over: %w", err)
	}
	c.Log().Info("move: cut over", "job", mv.t.JobID, "what", p.What(), "writes_blocked", blocked)
	if err := c.Catalog.RecordMoveWriteBlock(ctx, mv.t.ID, blocked.Milliseconds()); err != nil {
		c.Log().Warn("move: could not record the write block", "err", err)
	}
	if err := mv.at(ctx, StepCutOver); err != nil {
		return err
	}
	stopApply()

	// 6. The commit point: the operation succeeds (the target is kept, the source is to go),
	// then the placement switches. Should this attempt die in between, the next one finds
	// the operation succeeded and only switches (see Run).
	if err := op.Succeed(ctx); err != nil {
		return err
	}
	if err := c.Catalog.SwitchPlacement(ctx, mv.t.JobID, p.objects(), p.To); err != nil {
		return fmt.Errorf("switch the placement (the move itself is done; a retry switches it): %w", err)
	}
	if err := mv.at(ctx, StepSwitch); err != nil {
		return err
	}
	if err := validateForeignKeys(ctx, mv.dstConn, pl.fks); err != nil {
		c.Log().Warn("move: foreign keys left NOT VALID on the target", "job", mv.t.JobID, "err", err)
	}
	if !mv.LeaveToCleaner {
		if _, err := op.RemoveDue(ctx, 0); err != nil {
			c.Log().Warn("move: removal left work to the cleaner", "operation", op.ID(), "err", err)
		}
	}
	return mv.at(ctx, StepDone)
}

// runScripts runs DDL scripts in a session of their own (they change its settings).
func runScripts(ctx context.Context, session sessionFunc, scripts ...string) error {
	conn, release, err := session(ctx)
	if err != nil {
		return err
	}
	defer release()
	for _, s := range scripts {
		if err := execScript(ctx, conn, s); err != nil {
			return err
		}
	}
	return nil
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
