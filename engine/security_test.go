package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/testenv"
	"github.com/deckhandhq/deckhand/spec"
)

// intruderEnv is a catalog with one node, a worker, an admin's finished job whose tasks ran as
// the superuser, and an intruder: a submitter who is a member of app only, and who was also
// granted every privilege on every catalog table — the mistake an operator might make.
type intruderEnv struct {
	*testenv.Env
	node     string // the node's database
	app      string
	intruder string
	client   *engine.Client // as the intruder
	conn     *pgx.Conn      // as the intruder, for hand-written SQL
	adminJob int64
}

func newIntruderEnv(t *testing.T) *intruderEnv {
	t.Helper()
	e := &intruderEnv{Env: testenv.New(t)}
	e.node = e.AddNode("n1", 4)
	e.app = e.Role("app")
	e.intruder, e.client = e.Submitter("intruder", e.app)
	e.Exec(e.DB, `GRANT ALL ON ALL TABLES IN SCHEMA deckhand TO `+pgx.Identifier{e.intruder}.Sanitize()+`;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA deckhand TO `+pgx.Identifier{e.intruder}.Sanitize())
	e.Exec(e.node, `CREATE TABLE marks (who text, at timestamptz DEFAULT now()); GRANT INSERT ON marks TO `+pgx.Identifier{e.app}.Sanitize())
	e.Worker(engine.Config{})
	e.adminJob = submit(t, e.Env, &spec.Job{Description: "admin", Tasks: []spec.Task{
		{Name: "as_postgres", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1"}}})
	if job := e.Wait(e.adminJob, 30*time.Second); job.State != deckhandtype.JobFinished {
		t.Fatalf("admin job %s", job.State)
	}
	var err error
	e.conn, err = pgx.Connect(ctx, e.RoleDSN(e.intruder))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close(context.Background()) })
	return e
}

// refused runs sql as the intruder and fails the test unless PostgreSQL refused it for lack of
// privilege (42501).
func (e *intruderEnv) refused(t *testing.T, what, sql string, args ...any) {
	t.Helper()
	_, err := e.conn.Exec(ctx, sql, args...)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: err = %v, want permission denied (42501)", what, err)
	}
}

// Every forged row and update an attacker tried through her own connection is refused by the
// catalog itself, even with table privileges granted by mistake; what she may do, she can.
func TestCatalogRefusesForgedRows(t *testing.T) {
	e := newIntruderEnv(t)

	// Positive control: she submits a job as app, through the catalog's function, and it runs.
	own, err := e.client.Submit(ctx, &spec.Job{Tasks: []spec.Task{
		{Name: "mark", Node: "n1", Owner: e.app, SQL: "INSERT INTO marks (who) VALUES (current_user)"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job := e.Wait(own, 30*time.Second); job.State != deckhandtype.JobFinished || job.SubmittedBy != e.intruder {
		t.Fatalf("own job: %s submitted by %s", job.State, job.SubmittedBy)
	}

	const program = `COPY (SELECT 1) TO PROGRAM 'true'`
	e.refused(t, "take over her job's submitter", `UPDATE deckhand.job SET submitted_by = 'postgres' WHERE id = $1`, own)
	e.refused(t, "add a task to her own job", `INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		VALUES ($1, 'x', 'sql', 'n1', 'postgres', $2, 1, '1h', 'runnable')`, own, program)
	e.refused(t, "add a task to the admin's job", `INSERT INTO deckhand.task (job_id, name, kind, node, owner, sql, max_attempts, timeout, state)
		VALUES ($1, 'x', 'sql', 'n1', 'postgres', $2, 1, '1h', 'runnable')`, e.adminJob, program)
	e.refused(t, "rewrite the admin's task", `UPDATE deckhand.task SET sql = $2, state = 'runnable' WHERE job_id = $1`, e.adminJob, program)
	e.refused(t, "forge an export", `INSERT INTO deckhand.export (job_id, source_table, partition, node_group, destination, compression, part_size)
		VALUES ($1, 'pg_authid', 'pg_authid', 'n1', 'file:///tmp/x', 'zstd', 1000000)`, own)
	e.refused(t, "forge an operation", `INSERT INTO deckhand.operation (job_id, owner, submitted_by) VALUES ($1, 'postgres', 'postgres')`, own)
	e.refused(t, "forge a cleanup record", `INSERT INTO deckhand.cleanup_record (operation_id, resource_type, node, location, name, policy, state)
		SELECT id, 'table', 'n1', 'public', 'marks', 'always', 'due' FROM deckhand.operation LIMIT 1`)
	e.refused(t, "redirect the node", `UPDATE deckhand.node SET dsn = 'host=attacker.example dbname=x'`)
	e.refused(t, "change a setting", `INSERT INTO deckhand.setting (name, value) VALUES ('export_destinations', 'file:///')`)
	e.refused(t, "pin", `INSERT INTO deckhand.cleanup_pin (resource_type, name) VALUES ('table', 'x')`)
	e.refused(t, "delete history", `DELETE FROM deckhand.task_attempt`)
	e.refused(t, "truncate", `TRUNCATE deckhand.job CASCADE`)
	e.refused(t, "add a node through the admin function", `SELECT deckhand.node_add('evil', 'host=attacker.example')`)
	e.refused(t, "change a setting through the admin function", `SELECT deckhand.set_setting('retention', '1s')`)
	e.refused(t, "cancel the admin's job", `SELECT deckhand.cancel($1)`, e.adminJob)

	// A spec cannot name its submitter, nor create deckhand's internal kinds.
	for name, body := range map[string]string{
		"submitted_by field": `{"submitted_by": "postgres", "tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"}]}`,
		"export coordinator": `{"tasks": [{"name": "a", "node": "n1", "kind": "export", "owner": "postgres"}]}`,
		"export part":        `{"tasks": [{"name": "a", "kind": "export_part", "owner": "postgres", "payload": {"export_id": 1}}]}`,
	} {
		_, err := e.conn.Exec(ctx, `SELECT deckhand.submit($1::jsonb)`, body)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("submit with %s: err = %v, want refused as invalid (22023)", name, err)
		}
	}

	// Nothing of the above reached a table.
	var tasks, mine, superTasks int
	err = e.Pool(e.DB).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE j.submitted_by = $1),
			count(*) FILTER (WHERE t.owner = 'postgres' AND j.submitted_by <> 'postgres')
		FROM deckhand.task t JOIN deckhand.job j ON j.id = t.job_id`, e.intruder).Scan(&tasks, &mine, &superTasks)
	if err != nil {
		t.Fatal(err)
	}
	if tasks != 2 || mine != 1 || superTasks != 0 {
		t.Errorf("catalog holds %d tasks (%d of the intruder, %d run as postgres for someone else), want 2, 1, 0", tasks, mine, superTasks)
	}
	var dsn string
	if err := e.Pool(e.DB).QueryRow(ctx, `SELECT dsn FROM deckhand.node WHERE name = 'n1'`).Scan(&dsn); err != nil || strings.Contains(dsn, "attacker") {
		t.Errorf("node dsn = %q (%v)", dsn, err)
	}
}

// Views show a submitter her own jobs and those whose every owner she is a member of; the
// tables behind them are closed.
func TestViewsShowWhatTheCallerMayActOn(t *testing.T) {
	e := newIntruderEnv(t)
	bystander, other := e.Submitter("bystander")
	appJob, err := other.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", SQL: "SELECT 1"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Wait(appJob, 30*time.Second)
	own, err := e.client.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "a", Node: "n1", Owner: e.app, SQL: "SELECT 1"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Wait(own, 30*time.Second)

	jobs, err := e.client.Jobs(ctx, deckhandtype.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != own {
		t.Errorf("the intruder sees %d jobs %v, want only her own (%d)", len(jobs), jobs, own)
	}
	if d, err := e.client.Job(ctx, e.adminJob); err == nil {
		t.Errorf("the intruder reads the admin's job: %+v", d.Job)
	}
	// A member of every owner of a job may see it: the bystander's job ran as the bystander.
	var n int
	if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM deckhand.tasks WHERE job_id = $1`, appJob).Scan(&n); err != nil || n != 0 {
		t.Errorf("the intruder sees %d tasks of %s's job (%v), want 0", n, bystander, err)
	}
	e.Exec("postgres", `GRANT `+pgx.Identifier{bystander}.Sanitize()+` TO `+pgx.Identifier{e.intruder}.Sanitize())
	if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM deckhand.tasks WHERE job_id = $1`, appJob).Scan(&n); err != nil || n != 1 {
		t.Errorf("as a member of %s the intruder sees %d tasks of its job (%v), want 1", bystander, n, err)
	}
}

// Cancel and retry are for the job's submitter, a member of every owner, or an admin; a
// refusal changes nothing and says why.
func TestCancelAndRetryNeedTheRightToActOnTheJob(t *testing.T) {
	e := newIntruderEnv(t)
	failing := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{
		{Name: "fails", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT 1/0", MaxAttempts: 1}}})
	if job := e.Wait(failing, 30*time.Second); job.State != deckhandtype.JobFailed {
		t.Fatalf("job %s", job.State)
	}
	long := submit(t, e.Env, &spec.Job{Tasks: []spec.Task{
		{Name: "sleeps", Node: "n1", Owner: pgcluster.Superuser, SQL: "SELECT pg_sleep(60)"}}})

	for name, call := range map[string]func() (deckhandtype.JobState, error){
		"cancel": func() (deckhandtype.JobState, error) { return e.client.Cancel(ctx, long) },
		"retry":  func() (deckhandtype.JobState, error) { return e.client.Retry(ctx, failing) },
		"pause":  func() (deckhandtype.JobState, error) { return e.client.Pause(ctx, long, true) },
		"resume": func() (deckhandtype.JobState, error) { return e.client.Resume(ctx, long) },
	} {
		_, err := call()
		if !errors.Is(err, catalog.ErrForbidden) || !engine.IsInvalid(err) || !strings.Contains(err.Error(), "may not "+name) {
			t.Errorf("%s of the admin's job by the intruder: err = %v, want a refusal", name, err)
		}
	}
	if d := detail(t, e.Env, failing); d.State != deckhandtype.JobFailed || d.Tasks[0].Attempts != 1 {
		t.Errorf("after the refused retry the admin's job is %s with %d attempts", d.State, d.Tasks[0].Attempts)
	}
	if d := detail(t, e.Env, long); d.CancelRequestedAt != nil || d.PausedAt != nil {
		t.Errorf("the refused cancel or pause was recorded")
	}

	// A member of every owner may: app's job, cancelled by someone else who is a member of app.
	_, peer := e.Submitter("peer", e.app)
	appJob, err := e.client.Submit(ctx, &spec.Job{Tasks: []spec.Task{{Name: "sleeps", Node: "n1", Owner: e.app, SQL: "SELECT pg_sleep(60)"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Pause(ctx, appJob, false); err != nil {
		t.Errorf("a member of app pausing app's job: %v", err)
	}
	if _, err := peer.Cancel(ctx, appJob); err != nil {
		t.Errorf("a member of app cancelling app's job: %v", err)
	}
	if job := e.Wait(appJob, 30*time.Second); job.State != deckhandtype.JobCancelled {
		t.Errorf("app's job ended %s, want cancelled", job.State)
	}
	// The admin may act on anyone's job.
	if _, err := e.Client.Cancel(ctx, long); err != nil {
		t.Errorf("admin cancel: %v", err)
	}
	if _, err := e.Client.Retry(ctx, failing); err != nil {
		t.Errorf("admin retry: %v", err)
	}
}

// SQL users have the same control from psql: submit (their search_path captured), wait, cancel.
func TestSQLFunctions(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	role, _ := e.Submitter("sqluser")
	e.Worker(engine.Config{})
	conn, err := pgx.Connect(ctx, e.RoleDSN(role))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET search_path = myschema, public`); err != nil {
		t.Fatal(err)
	}
	var id int64
	var state deckhandtype.JobState
	err = conn.QueryRow(ctx, `SELECT deckhand.submit('{"tasks": [{"name": "a", "node": "n1", "sql": "SELECT 1"},
		{"name": "b", "node": "n1", "sql": "SELECT 2", "depends_on": ["a"], "timeout": "10m"}]}')`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT deckhand.wait($1, '30 seconds')`, id).Scan(&state); err != nil || state != deckhandtype.JobFinished {
		t.Fatalf("wait: %s, %v", state, err)
	}
	var path, submitter string
	err = e.Pool(e.DB).QueryRow(ctx, `SELECT search_path, submitted_by FROM deckhand.job WHERE id = $1`, id).Scan(&path, &submitter)
	if err != nil || path != "myschema, public" || submitter != role {
		t.Errorf("job search_path %q submitted by %q (%v), want the caller's", path, submitter, err)
	}
	// wait returns the state as it is when the timeout passes first.
	err = conn.QueryRow(ctx, `SELECT deckhand.submit('{"tasks": [{"name": "s", "node": "n1", "sql": "SELECT pg_sleep(60)"}]}')`).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := conn.QueryRow(ctx, `SELECT deckhand.wait($1, '200 milliseconds')`, id).Scan(&state); err != nil || state.Terminal() {
		t.Errorf("wait with a short timeout: %s, %v", state, err)
	}
	if took := time.Since(began); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("wait took %s for a 200ms timeout", took)
	}
	if err := conn.QueryRow(ctx, `SELECT deckhand.cancel($1)`, id).Scan(&state); err != nil || state != deckhandtype.JobCancelling && state != deckhandtype.JobCancelled {
		t.Errorf("cancel: %s, %v", state, err)
	}
	if err := conn.QueryRow(ctx, `SELECT deckhand.wait($1)`, id).Scan(&state); err != nil || state != deckhandtype.JobCancelled {
		t.Errorf("wait after cancel: %s, %v", state, err)
	}
}

// A worker needs no more than deckhand_worker in the catalog: it runs jobs end to end.
func TestWorkerRunsAsDeckhandWorker(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	role := e.Role("worker")
	e.Exec("postgres", `GRANT deckhand_worker TO `+pgx.Identifier{role}.Sanitize())
	cat, err := catalog.Open(ctx, e.RoleDSN(role))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w := engine.NewWorker(cat, engine.Config{LeaseTTL: 2 * time.Second, MaintenanceInterval: 100 * time.Millisecond})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	id := submit(t, e, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Node: "n1", SQL: "SELECT 1"}, {Name: "b", Node: "n1", SQL: "SELECT 1/0", MaxAttempts: 2, DependsOn: []string{"a"}}}})
	if job := e.Wait(id, 30*time.Second); job.State != deckhandtype.JobFailed || job.TasksDone != 1 {
		t.Fatalf("job %s with %d done, want failed with 1 done: %s", job.State, job.TasksDone, explain(detail(t, e, id)))
	}
	testenv.Eventually(t, 10*time.Second, w.Leading, "the worker leads")
}

// Any role that may connect to the catalog's database may LISTEN there, deckhand user or not:
// what deckhand notifies must not tell it which jobs exist, change state or are cancelled,
// since the views tell each role only of the jobs it may act on. Waiting still wakes at once.
func TestNotificationsNameNoJob(t *testing.T) {
	e := testenv.New(t)
	e.AddNode("n1", 4)
	onlooker := e.Role("onlooker")
	conn, err := pgx.Connect(ctx, e.RoleDSN(onlooker))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, ch := range []string{catalog.ChannelJob, catalog.ChannelCancel, catalog.ChannelCleanup, catalog.ChannelRunnable} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	e.Worker(engine.Config{})
	long := submit(t, e, &spec.Job{Tasks: []spec.Task{{Name: "long", Node: "n1", SQL: "SELECT pg_sleep(60)"}}})
	testenv.Eventually(t, 10*time.Second, func() bool {
		d := detail(t, e, long)
		return d.Tasks[0].State == deckhandtype.TaskRunning
	}, "the task runs")
	if _, err := e.Client.Cancel(ctx, long); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if job := e.Wait(long, 30*time.Second); job.State != deckhandtype.JobCancelled {
		t.Fatalf("job %s", job.State)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("waiting for the cancelled job took %s", took)
	}
	ids := []string{strconv.FormatInt(long, 10)}
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		for _, id := range ids {
			if n.Payload == id || strings.HasPrefix(n.Payload, id+":") {
				t.Errorf("a role with no access to job %s heard %s %q", id, n.Channel, n.Payload)
			}
		}
	}
}
