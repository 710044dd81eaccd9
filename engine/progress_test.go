package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// While a CREATE INDEX on a million rows runs (one process, 1 MB of maintenance_work_mem),
// the task's progress — phase and done/total, read by its worker on the node — shows in the
// job's detail (what `job show -o json` prints) and grows before the task finishes; once it
// has finished, no progress is shown.
func TestRunningStatementProgress(t *testing.T) {
	e := testenv.New(t)
	db := e.AddNode("n1", 4)
	began := time.Now()
	e.Exec(db, `CREATE TABLE big (id int, v text);
		INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g`)
	t.Logf("1,000,000 rows written in %s", time.Since(began).Round(time.Millisecond))
	e.Worker(engine.Config{ProgressInterval: 100 * time.Millisecond})
	id := submit(t, e, &spec.Job{
		Settings: map[string]string{"maintenance_work_mem": "1MB", "max_parallel_maintenance_workers": "0"},
		Tasks:    []spec.Task{{Name: "build", Node: "n1", SQL: `CREATE INDEX big_v_idx ON big (v, id)`}},
	})
	type sample struct {
		p  deckhandtype.TaskProgress
		at time.Duration
	}
	var samples []sample
	start := time.Now()
	var final *engine.JobDetail
	for time.Since(start) < 5*time.Minute {
		d, err := e.Client.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.State.Terminal() {
			final = d
			break
		}
		if p := d.Tasks[0].Progress; p != nil && (len(samples) == 0 || samples[len(samples)-1].p != *p) {
			samples = append(samples, sample{*p, time.Since(start)})
			// The JSON of job show carries it as the task's "progress" object.
			doc, _ := json.Marshal(d)
			var shown struct {
				Tasks []struct {
					Progress *struct {
						Phase string `json:"phase"`
						Done  *int64 `json:"done"`
						Total *int64 `json:"total"`
					} `json:"progress"`
				} `json:"tasks"`
			}
			if err := json.Unmarshal(doc, &shown); err != nil || shown.Tasks[0].Progress == nil || shown.Tasks[0].Progress.Done == nil {
				t.Fatalf("job detail JSON lacks the task's progress: %s", doc)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if final == nil || final.State != deckhandtype.JobFinished {
		t.Fatalf("job did not finish: %+v", final)
	}
	if final.Tasks[0].Progress != nil {
		t.Errorf("a finished task shows progress %+v", final.Tasks[0].Progress)
	}
	for _, s := range samples {
		t.Logf("%6s  %s %s", s.at.Round(time.Millisecond), s.p.Command, s.p)
	}
	// Within a phase that has a total, the fraction grows, and some reading is strictly
	// between none and all of it.
	growing, partial := 0, false
	for i, s := range samples {
		f := s.p.Fraction()
		if s.p.Command != "CREATE INDEX" || s.p.Unit == "" {
			t.Errorf("sample %+v: want CREATE INDEX with a unit", s.p)
		}
		if f > 0 && f < 1 {
			partial = true
		}
		if i > 0 && samples[i-1].p.Phase == s.p.Phase && f >= 0 {
			switch prev := samples[i-1].p.Fraction(); {
			case f > prev:
				growing++
			case f < prev:
				t.Errorf("progress went back within %q: %s then %s", s.p.Phase, samples[i-1].p, s.p)
			}
		}
	}
	if growing < 2 || !partial {
		t.Errorf("%d readings, %d of them growing within a phase, partial %v: want increasing fractions before the end", len(samples), growing, partial)
	}
}
