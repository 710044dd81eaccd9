package cli_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/cli"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// runBinary runs the deckhand binary against the catalog at dsn.
func runBinary(t *testing.T, bin, dsn string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DECKHAND_CATALOG="+dsn)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Errorf("%v: %v", args, err)
	}
	return result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// wantDuplicate checks the contract of a refused key: exit 4, the holder's id alone on stdout
// and one line on stderr that says why.
func wantDuplicate(t *testing.T, r result, holder string) {
	t.Helper()
	if r.code != cli.ExitDuplicate || r.stdout != holder+"\n" ||
		strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "is held by job "+holder) {
		t.Errorf("want exit 4, job %s on stdout and one line on stderr; got %s", holder, r)
	}
}

// Two processes submit a job with the same key at the same moment: the catalog keeps one;
// the other process exits 4 with that job's id. Once the job has ended the key is free.
func TestKeyAdmitsOneJobOfConcurrentSubmissions(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t)
	e := newEnv(t)
	e.AddNode("n1", 4)

	for round := range 3 {
		key := "nightly-" + string(rune('a'+round))
		var wg sync.WaitGroup
		results := make([]result, 2)
		start := make(chan struct{})
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i] = runBinary(t, bin, e.DSN, "job", "run", "--node", "n1", "--key", key, "SELECT 1")
			}()
		}
		close(start)
		wg.Wait()
		won, lost := results[0], results[1]
		if won.code != 0 {
			won, lost = lost, won
		}
		id := jobID(t, won)
		wantDuplicate(t, lost, id)
		var jobs int
		if err := e.Client.Catalog().Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM deckhand.job WHERE key = $1`, key).Scan(&jobs); err != nil || jobs != 1 {
			t.Fatalf("key %s: %d jobs (%v), want 1", key, jobs, err)
		}
	}

	// The spec's key works the same way, and job show tells it.
	spec := `{"key": "nightly-a", "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 2"}]}`
	r := e.runIn(spec, "job", "submit", "-")
	id := strings.TrimSpace(r.stdout)
	holder := decode[deckhandtype.Job](t, e.run("job", "show", id, "-o", "json"))
	if r.code != cli.ExitDuplicate || holder.Key == nil || *holder.Key != "nightly-a" {
		t.Fatalf("a spec with a held key: %s (holder %+v)", r, holder)
	}
	wantDuplicate(t, r, id)
	if out := e.run("job", "show", id).stdout; !strings.Contains(out, "key: nightly-a") {
		t.Errorf("job show does not tell the key:\n%s", out)
	}

	// Cancelled, the job frees its key; retrying it while another job holds the key is refused.
	want(t, e.run("job", "cancel", id), 0)
	next := jobID(t, e.runIn(spec, "job", "submit", "-"))
	wantDuplicate(t, e.run("job", "retry", id), next)
	want(t, e.run("job", "cancel", next), 0)
	want(t, e.run("job", "retry", id), 0)

	// --key on submit overrides the spec's key.
	jobID(t, e.runIn(spec, "job", "submit", "-", "--key", "other"))

	wantUsage(t, e.run("job", "run", "--node", "n1", "--key", " padded", "SELECT 1"), "key must be 1 to 200 characters")
	wantUsage(t, e.runIn(`{"key": 7, "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 2"}]}`, "job", "submit", "-"), "key")
}

// Keys belong to their submitter: another role may use the same key at the same time, and
// learns nothing of the first role's job.
func TestKeysAreTheSubmittersOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	first := jobID(t, e.run("job", "run", "--node", "n1", "--key", "shared", "SELECT 1"))

	role, _ := e.Submitter("keyed")
	r := deckhand(t, "", "--catalog", e.RoleDSN(role), "job", "run", "--node", "n1", "--key", "shared", "SELECT 1")
	second := jobID(t, r)
	if second == first {
		t.Fatalf("two roles' jobs with one key share id %s", first)
	}
	r = deckhand(t, "", "--catalog", e.RoleDSN(role), "job", "run", "--node", "n1", "--key", "shared", "SELECT 1")
	wantDuplicate(t, r, second)
}

// job pause and job resume: the job's state after the request, -o json, and a clear refusal
// of a job that is not paused.
func TestPauseAndResumeCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "SELECT 1"))
	r := e.run("job", "pause", id)
	if r.code != 0 || r.stdout != "job "+id+" paused\n" {
		t.Fatalf("job pause: %s", r)
	}
	if j := decode[deckhandtype.Job](t, e.run("job", "show", id, "-o", "json")); j.State != deckhandtype.JobPaused || j.PausedAt == nil {
		t.Errorf("job show of a paused job: %+v", j)
	}
	if paused := e.listJobs("--state", "paused"); len(paused) != 1 {
		t.Errorf("job list --state paused = %+v", paused)
	}
	want(t, e.run("job", "pause", id, "--now"), 0)
	r = e.run("job", "resume", id, "-o", "json")
	if got := decode[map[string]any](t, r); got["state"] != "scheduled" {
		t.Errorf("job resume -o json: %s", r)
	}
	// A request the job's state refuses is bad input (exit 2), as for `cleanup retry` of a
	// record in the wrong state: 1 means the operation was tried and failed.
	wantUsage(t, e.run("job", "resume", id), "only a paused or pausing job can be resumed")
	wantUsage(t, e.run("job", "retry", id), "only failed or cancelled jobs can be retried")
	want(t, e.run("job", "cancel", id), 0)
	wantUsage(t, e.run("job", "pause", id), "can be paused", "cancelled")
	wantUsage(t, e.run("job", "pause", id, "--now"), "can be paused", "cancelled")
	wantUsage(t, e.run("job", "resume", id), "only a paused or pausing job can be resumed")
}

// --priority on job run and job submit, shown by job show, job list and -o json.
func TestPriorityFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.AddNode("n1", 4)
	id := jobID(t, e.run("job", "run", "--node", "n1", "--priority", "7", "SELECT 1"))
	if j := decode[deckhandtype.Job](t, e.run("job", "show", id, "-o", "json")); j.Priority != 7 {
		t.Errorf("job show -o json: priority %d, want 7", j.Priority)
	}
	if out := e.run("job", "show", id).stdout; !strings.Contains(out, "priority: 7") {
		t.Errorf("job show does not tell the priority:\n%s", out)
	}
	spec := `{"priority": 3, "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 2"}]}`
	fromSpec := jobID(t, e.runIn(spec, "job", "submit", "-"))
	overridden := jobID(t, e.runIn(spec, "job", "submit", "-", "--priority", "-5"))
	got := map[string]int{}
	for _, j := range e.listJobs() {
		got[strconv.FormatInt(j.ID, 10)] = j.Priority
	}
	if got[id] != 7 || got[fromSpec] != 3 || got[overridden] != -5 {
		t.Errorf("job list -o json priorities: %v", got)
	}
	if out := e.run("job", "list").stdout; !strings.Contains(out, "PRIORITY") {
		t.Errorf("job list has no priority column:\n%s", out)
	}
	wantUsage(t, e.run("job", "run", "--node", "n1", "--priority", "101", "SELECT 1"), "priority must be a whole number between -100 and 100")
	wantUsage(t, e.runIn(`{"priority": 1.5, "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 2"}]}`, "job", "submit", "-"), "priority")
}
