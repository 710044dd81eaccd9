package move

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
)

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
	// scratchKept: the scratch schema is an earlier attempt's, its record taken over (resume).
	scratchKept bool
}

// afterStep is the fault hook of test builds (see faults_faultinject.go); nil otherwise.
var afterStep func(step string)

func (mv *move) at(ctx context.Context, step string) error {
	// The tables the copy copies (plain tables and leaf partitions), which tables_copied
	// counts: a partitioned table has no rows of its own.
	if err := mv.step(ctx, mv.t, step, len(mv.pl.copied())); err != nil {
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

func (mv *move) session(o nodeconn.Owner) sessionFunc { return dedicated(o, mv.t) }

// dedicated opens sessions of the attempt's owner that belong to no pool: a move holds
// several on each node at once (see nodeconn.DedicatedSession).
func dedicated(o nodeconn.Owner, t *deckhandtype.ClaimedTask) sessionFunc {
	return func(ctx context.Context) (*pgx.Conn, func(), error) {
		conn, err := nodeconn.DedicatedSession(ctx, o, t)
		if err != nil {
			return nil, nil, err
		}
		return conn, func() { conn.Close(context.Background()) }, nil //nolint:errcheck
	}
}

func (mv *move) run(ctx context.Context) error {
	st, err := mv.structure(ctx)
	if err != nil {
		return err
	}
	repl, snapshot, start, err := mv.slot(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background()) //nolint:errcheck
	if err := mv.copy(ctx, snapshot, st); err != nil {
		return err
	}
	return mv.finish(ctx, st, repl, start)
}

// finish runs the steps after the copy: the catch-up from start (or from where the target's
// progress table stands, if later), the cut-over and the switch.
func (mv *move) finish(ctx context.Context, st *structure, repl *pgconn.PgConn, start pglogrepl.LSN) error {
	waitFor, stopApply, err := mv.catchUp(ctx, repl, start)
	if err != nil {
		return err
	}
	defer stopApply()
	// A name created on another group since the move began, or a node removed from the
	// catalog, is found before writers are blocked.
	if err := mv.endpointsRegistered(ctx); err != nil {
		return err
	}
	if err := mv.heldElsewhere(ctx, mv.p); err != nil {
		return err
	}
	if err := mv.cutOver(ctx, st, waitFor); err != nil {
		return err
	}
	stopApply()
	return mv.switchOver(ctx)
}

// structure dumps the source's DDL as the owner and creates the pre-data and the keys on the
// target. What the target gets is removed if the move fails.
func (mv *move) structure(ctx context.Context) (*structure, error) {
	op, pl, p, dstNode := mv.op, mv.pl, mv.p, mv.dst.node.Name
	st, err := mv.dump(ctx)
	if err != nil {
		return nil, err
	}
	if p.Schema != "" {
		if _, err := op.Register(ctx, cleanup.SchemaCascade(dstNode, p.Schema), cleanup.OnFailure); err != nil {
			return nil, err
		}
	} else {
		if err := mv.createSchemas(ctx); err != nil {
			return nil, err
		}
		for _, r := range pl.published() {
			if _, err := op.Register(ctx, cleanup.Table(dstNode, r.Schema, r.Name), cleanup.OnFailure); err != nil {
				return nil, err
			}
		}
	}
	if err := runScripts(ctx, mv.session(mv.dst.owner), st.preData); err != nil {
		return nil, fmt.Errorf("create the structure on the target: %w", err)
	}
	if err := refuseOthersCode(ctx, mv.dstConn, mv.pl); err != nil {
		return nil, err
	}
	return st, mv.at(ctx, StepStructure)
}

// dump dumps the source's DDL as the owner.
func (mv *move) dump(ctx context.Context) (*structure, error) {
	dir, err := os.MkdirTemp("", "deckhand-move-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := dumpStructure(ctx, dumpProgram{dsn: nodeconn.WithUser(mv.src.owner.DSN, mv.src.owner.Role),
		appName: nodeconn.ApplicationName(mv.t.ID, mv.t.Token), dir: dir}, mv.pl, mv.p)
	if err != nil {
		return nil, fmt.Errorf("dump the structure: %w", err)
	}
	return st, nil
}

// slot creates the publication and the slot, on a replication connection that exports the
// snapshot the copy reads; the connection must stay open and idle until the copy has begun,
// and then serves the applier.
func (mv *move) slot(ctx context.Context) (repl *pgconn.PgConn, snapshot string, start pglogrepl.LSN, err error) {
	op, srcNode := mv.op, mv.src.node.Name
	if _, err := op.Register(ctx, cleanup.Publication(srcNode, mv.name), cleanup.Always); err != nil {
		return nil, "", 0, err
	}
	published := make([]string, 0, len(mv.pl.tables))
	for _, r := range mv.pl.published() {
		published = append(published, r.ident())
	}
	if _, err := mv.srcConn.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{mv.name}.Sanitize()+" FOR TABLE "+
		strings.Join(published, ", ")+" WITH (publish_via_partition_root = true)"); err != nil {
		return nil, "", 0, fmt.Errorf("create the publication: %w", err)
	}
	if _, err := op.Register(ctx, cleanup.ReplicationSlot(srcNode, mv.name), cleanup.Always); err != nil {
		return nil, "", 0, err
	}
	repl, err = replicationConn(ctx, mv.src.owner, mv.t)
	if err != nil {
		return nil, "", 0, err
	}
	snapshot, start, err = createSlot(ctx, repl, mv.name)
	if err == nil {
		err = mv.at(ctx, StepSlot)
	}
	if err != nil {
		repl.Close(context.Background()) //nolint:errcheck
		return nil, "", 0, fmt.Errorf("create the replication slot: %w", err)
	}
	return repl, snapshot, start, nil
}

// copy copies the rows under the snapshot, as many tables at a time as both nodes take
// tasks, into tables without indexes, then builds the keys, indexes and constraints (a build
// from the rows costs less than keeping an index up to date row by row).
func (mv *move) copy(ctx context.Context, snapshot string, st *structure) error {
	c := mv.Cleaner
	parallel := max(1, min(mv.src.node.MaxTasks, mv.dst.node.MaxTasks))
	if err := c.Catalog.StartMoveCopy(ctx, mv.t.ID); err != nil {
		return err
	}
	err := copyTables(ctx, mv.session(mv.src.owner), mv.session(mv.dst.owner), snapshot, mv.pl.copied(), parallel,
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
	// Keys first: the rest of the post-data (a partition's key attached to its parent's)
	// may refer to them.
	if err := runScripts(ctx, mv.session(mv.dst.owner), st.keys, st.postData); err != nil {
		return fmt.Errorf("create indexes and constraints on the target: %w", err)
	}
	// From here on, a later attempt can resume with what this one made.
	if err := mv.holdScaffold(ctx); err != nil {
		return err
	}
	return mv.at(ctx, StepIndexes)
}

// cutOver registers what the cut-over changes on the source — the refusal of writes, removed
// if the move fails after all; the source itself, dropped once the move has succeeded and no
// query uses it — and runs it.
func (mv *move) cutOver(ctx context.Context, st *structure, waitFor func(context.Context, pglogrepl.LSN) error) error {
	c, op, pl, p, srcNode := mv.Cleaner, mv.op, mv.pl, mv.p, mv.src.node.Name
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
	flusher, release, err := mv.session(mv.src.owner)(ctx)
	if err != nil {
		return err
	}
	defer release()
	co := &cutOver{src: mv.srcConn, dst: mv.dstConn, flusher: flusher, pl: pl, st: st, budget: p.maxWriteBlock(), refusal: refusalFn,
		message: "pg_catalog.format('relation %I.%I moved to group %s by job %s: write to it there', TG_TABLE_SCHEMA, TG_TABLE_NAME, " +
			literal(p.To) + ", " + literal(strconv.FormatInt(mv.t.JobID, 10)) + ")",
		waitFor: waitFor, log: c.Log().Info, sleep: sleep, tries: mv.CutOverTries}
	blocked, err := co.run(ctx)
	if err != nil {
		return fmt.Errorf("cut-over: %w", err)
	}
	c.Log().Info("move: cut over", "job", mv.t.JobID, "what", p.What(), "writes_blocked", blocked)
	if err := c.Catalog.RecordMoveWriteBlock(ctx, mv.t.ID, blocked.Milliseconds()); err != nil {
		c.Log().Warn("move: could not record the write block", "err", err)
	}
	return mv.at(ctx, StepCutOver)
}

// switchOver is the commit point: the operation succeeds (the target is kept, the source is
// to go), then the placement switches. Should this attempt die in between, the next one finds
// the operation succeeded and only switches (see Run). Just before, the other groups are
// asked a last time whether they hold the moved names: if one does now, the move fails
// instead, and its failure removes what the cut-over changed (the source takes writes again).
func (mv *move) switchOver(ctx context.Context) error {
	c, op := mv.Cleaner, mv.op
	if err := mv.endpointsRegistered(ctx); err != nil {
		return err
	}
	if err := mv.heldElsewhere(ctx, mv.p); err != nil {
		return err
	}
	if err := op.Succeed(ctx); err != nil {
		return err
	}
	if err := mv.releaseHold(ctx, mv.t); err != nil {
		c.Log().Warn("move: could not release the hold on its resources; they go when the job ends", "job", mv.t.JobID, "err", err)
	}
	if err := c.Catalog.SwitchPlacement(ctx, mv.t.JobID, mv.p.objects(), mv.p.To); err != nil {
		return fmt.Errorf("switch the placement (the move itself is done; a retry switches it): %w", err)
	}
	if err := mv.at(ctx, StepSwitch); err != nil {
		return err
	}
	if err := validateForeignKeys(ctx, mv.dstConn, mv.pl.fks); err != nil {
		c.Log().Warn("move: foreign keys left NOT VALID on the target", "job", mv.t.JobID, "err", err)
	}
	if !mv.LeaveToCleaner {
		if _, err := op.RemoveDue(ctx, 0); err != nil {
			c.Log().Warn("move: removal left work to the cleaner", "operation", op.ID(), "err", err)
		}
	}
	return mv.at(ctx, StepDone)
}

// endpointsRegistered checks that the catalog still has the move's two nodes as the move
// found them (name, group and conninfo). A node removed meanwhile (`deckhand node remove`,
// to decommission it) or pointed at another server is no place to switch a placement to, nor
// to drop the source for: the move fails instead, and its failure gives the source its
// writes back. A later attempt finds the groups afresh.
func (mv *move) endpointsRegistered(ctx context.Context) error {
	nodes, err := mv.Cleaner.Catalog.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, e := range []struct {
		end  endpoint
		side string
	}{{mv.src, "source"}, {mv.dst, "target"}} {
		i := slices.IndexFunc(nodes, func(n deckhandtype.Node) bool { return n.Name == e.end.node.Name })
		switch {
		case i < 0:
			return fmt.Errorf("the %s, node %s of group %s, is no longer registered (removed during the move): the move stops here and its objects stay where they were",
				e.side, e.end.node.Name, e.end.node.Group)
		case nodes[i].Group != e.end.node.Group || nodes[i].DSN != e.end.node.DSN:
			return fmt.Errorf("the %s, node %s, was changed during the move (its group or conninfo): the move stops here and its objects stay where they were",
				e.side, e.end.node.Name)
		}
	}
	return nil
}

// createSchemas creates on the target the schemas of moved tables that it lacks (a table
// move's dump has no CREATE SCHEMA); they stay if the move succeeds.
func (mv *move) createSchemas(ctx context.Context) error {
	for _, s := range mv.pl.schemas {
		var exists bool
		if err := mv.dstConn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1::pg_catalog.text)`,
			s).Scan(&exists); err != nil {
			return err
		}
		if exists {
			continue
		}
		id, err := mv.op.Register(ctx, cleanup.Schema(mv.dst.node.Name, s), cleanup.OnFailure)
		if err != nil {
			return err
		}
		if _, err := mv.dstConn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P06" { // created meanwhile: not ours
				if err := mv.op.Forget(ctx, id); err != nil {
					return err
				}
				continue
			}
			return err
		}
	}
	return nil
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
