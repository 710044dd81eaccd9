package catalog_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	. "github.com/deckhandhq/deckhand/deckhandtype" //nolint:revive // states read as the tables do
	"github.com/deckhandhq/deckhand/internal/catalog"
	ct "github.com/deckhandhq/deckhand/internal/catalog/catalogtest"
)

var exportStates = []ExportState{ExportPlanning, ExportRunning, ExportCommitted, ExportSuperseded}

// PlanExport and CommitExport, from exports in every state, by a coordinator that holds the
// export or by one whose attempt is over.
func TestExportStatementsFollowTheStateMachines(t *testing.T) {
	m := newMachines(t)
	t.Run("PlanExport", m.planExport)
	t.Run("CommitExport", m.commitExport)
}

func (m *machines) planExport(t *testing.T) {
	s := m.statement(t, "PlanExport")
	end := int64(10)
	parts := []TaskState{TaskBlocked, TaskRunnable, TaskRunning, TaskDone, TaskFailed, TaskCancelling, TaskCancelled}
	for _, st := range exportStates {
		for _, coordinator := range []TaskState{TaskRunning, TaskRunnable, "running, its job paused"} {
			s.run(string(st)+", coordinator "+string(coordinator), func(c *step) {
				opts := &ct.ExportOpts{State: st, Coordinator: coordinator, Parts: parts}
				if coordinator != TaskRunning && coordinator != TaskRunnable {
					// The job was paused after its coordinator started: its earlier parts are paused.
					coordinator = TaskRunning
					opts.Coordinator, opts.Parts = coordinator, []TaskState{TaskPaused, TaskBlocked, TaskRunning, TaskDone}
				}
				e := ct.Export(ctx, t, m.db, opts)
				co := e.Coordinator()
				if coordinator != TaskRunning {
					co.Token = e.Job.Tasks[1].Token + 1000 // an attempt that is over
				}
				c.do(func() error {
					_, err := m.cat.PlanExport(ctx, catalog.ExportPlan{
						ExportID: e.ID, CoordinatorID: co.ID, Token: co.Token, ConsistencyLSN: "0/1", Columns: json.RawMessage(`[]`),
						Parts: []catalog.ExportPart{{Part: 0, EndPage: &end}, {Part: 1, StartPage: end}},
						Key:   func(epoch, part int) string { return catalog.PartTaskPrefix(epoch) + strconv.Itoa(part) },
						PartTask: func(epoch int, p catalog.ExportPart) catalog.NewTask {
							return catalog.NewTask{Name: catalog.PartTaskPrefix(epoch) + strconv.Itoa(p.Part), Kind: "export_part",
								Owner: "app", InTransaction: true, MaxAttempts: 3, Timeout: time.Hour}
						},
					})
					return err
				}, catalog.ErrStaleAttempt, catalog.ErrExportCommitted)
			})
		}
	}
	s.promised()
}

func (m *machines) commitExport(t *testing.T) {
	s := m.statement(t, "CommitExport")
	for _, st := range exportStates {
		for _, current := range []bool{true, false} {
			s.run(string(st)+map[bool]string{true: ", by its coordinator", false: ", by a stale coordinator"}[current], func(c *step) {
				e := ct.Export(ctx, t, m.db, &ct.ExportOpts{State: st})
				for _, other := range exportStates {
					ct.Export(ctx, t, m.db, &ct.ExportOpts{State: other, Destination: e.Destination})
				}
				token := e.Coordinator().Token
				if !current {
					token--
				}
				c.do(func() error { return m.cat.CommitExport(ctx, e.ID, e.Epoch, token, e.Destination+"/manifest.json") },
					catalog.ErrStaleAttempt)
			})
		}
	}
	s.promised()
}
