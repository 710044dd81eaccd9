package move

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/logicalapply"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// A new attempt resumes a move whose earlier attempt died after these steps: the copy and
// the indexes are done, the cut-over has not begun (it redoes a cut-over cut short).
var resumableSteps = map[string]bool{StepIndexes: true, StepCatchUp: true}

// scaffoldName is the name of a move's slot, publication and scratch schema.
var scaffoldName = regexp.MustCompile(`^deckhand_move_[0-9]+_[0-9a-f]{8}$`)

// resume continues the move where an earlier attempt of t died, if that attempt got past the
// copy and the indexes: its operation's records of the target objects, the slot, the
// publication and the scratch schema are taken over by this attempt's operation (so that no
// cleaner removes them, and this attempt's outcome decides their fate), the nodes are checked
// to hold them all, and the catch-up goes on from the target's progress table. handled is
// false when there is nothing to resume or anything is missing or inconsistent: whatever was
// taken over is then left failed, and the caller restarts the move cleanly.
func (m Mover) resume(ctx context.Context, t *deckhandtype.ClaimedTask, p Payload, src, dst endpoint) (handled bool, err error) {
	c := m.Cleaner
	prog, ok, err := c.Catalog.MoveProgress(ctx, t.ID)
	if err != nil || !ok || !resumableSteps[prog.Step] {
		return false, err
	}
	if _, err := c.Catalog.DecideOperations(ctx); err != nil {
		return false, err
	}
	ops, err := c.Catalog.LeftoverOperationsOfTask(ctx, t.ID)
	if err != nil || len(ops) == 0 {
		return false, err
	}
	from := ops[len(ops)-1] // the dead attempt's: every attempt records the plan step before it begins one
	recs, err := c.Catalog.CleanupRecords(ctx, deckhandtype.CleanupFilter{OperationID: from, Limit: 100000})
	if err != nil {
		return false, err
	}
	name, kept, why := scaffoldOf(recs, src.node.Name, dst.node.Name)
	if why != "" {
		c.Log().Info("move: not resuming the earlier attempt; restarting", "task", t.ID, "operation", from, "why", why)
		return false, nil
	}
	srcConn, releaseSrc, err := dedicated(src.owner, t)(ctx)
	if err != nil {
		return true, err
	}
	defer releaseSrc()
	dstConn, releaseDst, err := dedicated(dst.owner, t)(ctx)
	if err != nil {
		return true, err
	}
	defer releaseDst()
	pl, err := inspect(ctx, srcConn, p)
	if err != nil {
		return true, err
	}
	if err := c.Catalog.BeginMove(ctx, t.JobID, p.objects(), p.From, p.To); err != nil {
		if errors.Is(err, catalog.ErrAlreadyMoving) || errors.Is(err, catalog.ErrPlacedElsewhere) {
			return true, taskerr.Permanent(err)
		}
		return true, err
	}
	op, err := c.Begin(ctx, t, p.Description())
	if err != nil {
		return true, err
	}
	mv := &move{Mover: m, t: t, p: p, pl: pl, op: op, src: src, dst: dst, srcConn: srcConn, dstConn: dstConn, name: name}
	start, why, err := mv.takeOver(ctx, from, kept, recs, prog.Step)
	if why != "" || err != nil {
		if ctx.Err() != nil {
			m.settle(ctx, t, p, op, ctx.Err(), false)
			return true, ctx.Err()
		}
		if err != nil {
			why = err.Error()
		}
		c.Log().Info("move: not resuming the earlier attempt; restarting", "task", t.ID, "operation", from, "why", why)
		// What was taken over goes with this operation, failed; the caller's removal of
		// leftovers waits for it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if ferr := op.Fail(fctx, fmt.Errorf("not resumed: %s", why)); ferr != nil {
			return true, ferr
		}
		return false, nil
	}
	defer func() { m.settle(ctx, t, p, op, err, err == nil) }()
	// The catch-up writes again: what the target's tables run must still be the owner's own.
	if err := refuseOthersCode(ctx, dstConn, pl); err != nil {
		return true, err
	}
	c.Log().Info("move: resuming the catch-up of an earlier attempt", "job", t.JobID, "task", t.ID,
		"operation", from, "slot", name, "from_lsn", start.String())
	st, err := mv.dump(ctx)
	if err != nil {
		return true, err
	}
	repl, err := replicationConn(ctx, src.owner, t)
	if err != nil {
		return true, err
	}
	defer repl.Close(context.Background()) //nolint:errcheck
	return true, mv.finish(ctx, st, repl, start)
}

// scaffoldOf picks, among the records of the dead attempt's operation, those a resumed
// attempt keeps: every record on the target (the moved objects and the scratch schema) and
// the publication and the slot on the source. The source's other records (the refusal of
// writes of a cut-over cut short) stay with that operation and are removed. why says what is
// missing. The names may be those of an earlier operation still (an attempt that resumed and
// died in turn).
func scaffoldOf(recs []deckhandtype.CleanupRecord, srcNode, dstNode string) (name string, kept []int64, why string) {
	var pub, slot string
	for _, r := range recs {
		if r.Node == nil || r.State == deckhandtype.CleanupState("node_removed") {
			continue
		}
		switch {
		case r.State != "pending" && r.State != "due" && r.State != "in_use" && r.State != "retrying" && r.State != "pinned":
			continue
		case *r.Node == dstNode && r.Policy != cleanup.DeferredOnSuccess:
			kept = append(kept, r.ID)
		case *r.Node == srcNode && r.Type == deckhandtype.ResourcePublication:
			pub = r.Name
			kept = append(kept, r.ID)
		case *r.Node == srcNode && r.Type == deckhandtype.ResourceReplicationSlot:
			slot = r.Name
			kept = append(kept, r.ID)
		}
	}
	switch {
	case slot == "" || pub == "":
		return "", nil, "the slot or the publication is no longer recorded"
	case pub != slot || !scaffoldName.MatchString(slot):
		return "", nil, fmt.Sprintf("unexpected slot %q and publication %q", slot, pub)
	}
	return slot, kept, ""
}

// takeOver hands the records kept to this attempt's operation and checks that the nodes hold
// what they name: the slot, the publication of the plan's tables, the target's tables, and
// the progress table if the catch-up had begun. start is where the catch-up goes on (the
// applier takes the later of it and the progress table's position). why says what is missing.
func (mv *move) takeOver(ctx context.Context, from int64, kept []int64, recs []deckhandtype.CleanupRecord, step string) (
	start pglogrepl.LSN, why string, err error) {
	ok, err := mv.Cleaner.Catalog.TakeOverCleanup(ctx, from, mv.op.ID(), kept)
	if err != nil || !ok {
		return 0, "a record of the earlier attempt was removed meanwhile", err
	}
	owned := map[deckhandtype.CleanupResource]bool{}
	for _, r := range recs {
		if r.Node != nil && contains(kept, r.ID) {
			owned[deckhandtype.CleanupResource{Type: r.Type, Node: *r.Node, Location: r.Location, Name: r.Name}] = true
		}
	}
	dstNode := mv.dst.node.Name
	if mv.p.Schema != "" {
		if !owned[cleanup.SchemaCascade(dstNode, mv.p.Schema)] {
			return 0, "the target schema is not the earlier attempt's", nil
		}
	} else {
		for _, r := range mv.pl.published() {
			if !owned[cleanup.Table(dstNode, r.Schema, r.Name)] {
				return 0, fmt.Sprintf("target table %s is not the earlier attempt's", r.ident()), nil
			}
		}
	}
	// The earlier attempt's other leftovers (a cut-over's refusal of writes) go first.
	if err := mv.Cleaner.RemoveLeftovers(ctx, mv.t.ID, 10*time.Second); err != nil {
		return 0, "", err
	}
	var confirmed string
	err = mv.srcConn.QueryRow(ctx, `
		SELECT s.confirmed_flush_lsn::pg_catalog.text FROM pg_catalog.pg_replication_slots s
		WHERE s.slot_name OPERATOR(pg_catalog.=) $1::pg_catalog.text AND s.plugin OPERATOR(pg_catalog.=) 'pgoutput'
		  AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database() AND s.confirmed_flush_lsn IS NOT NULL`,
		mv.name).Scan(&confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "the replication slot is gone", nil
	}
	if err != nil {
		return 0, "", err
	}
	if start, err = pglogrepl.ParseLSN(confirmed); err != nil {
		return 0, "", err
	}
	for _, r := range mv.pl.published() {
		var published, onTarget bool
		if err := mv.srcConn.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t
			               WHERE t.pubname OPERATOR(pg_catalog.=) $1::pg_catalog.text
			                 AND t.schemaname OPERATOR(pg_catalog.=) $2::pg_catalog.text
			                 AND t.tablename OPERATOR(pg_catalog.=) $3::pg_catalog.text)`,
			mv.name, r.Schema, r.Name).Scan(&published); err != nil {
			return 0, "", err
		}
		if err := mv.dstConn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`,
			r.ident()).Scan(&onTarget); err != nil {
			return 0, "", err
		}
		switch {
		case !published:
			return 0, fmt.Sprintf("the publication lacks %s", r.ident()), nil
		case !onTarget:
			return 0, fmt.Sprintf("the target lacks %s", r.ident()), nil
		}
	}
	mv.scratchKept = owned[cleanup.SchemaCascade(dstNode, mv.name)]
	var progress bool
	if err := mv.dstConn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`,
		pgx.Identifier{mv.name, "progress"}.Sanitize()).Scan(&progress); err != nil {
		return 0, "", err
	}
	switch {
	case progress && !mv.scratchKept:
		return 0, "the progress table is not the earlier attempt's", nil
	case !progress && step == StepCatchUp:
		// The catch-up began: only the progress table says what it applied.
		return 0, "the progress table is gone", nil
	case progress:
		applied, err := logicalapply.AppliedLSN(ctx, mv.dstConn, pgx.Identifier{mv.name, "progress"})
		if err != nil {
			return 0, "", err
		}
		start = max(start, applied)
	}
	return start, "", nil
}
