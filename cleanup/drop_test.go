package cleanup_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
	"github.com/deckhandhq/deckhand/internal/testenv"
)

// traffic is what runs against a node while a drop is pending: a long SELECT on the table,
// readers of the table and writers into another table, each statement timed.
type traffic struct {
	selectEnded time.Time // when the long SELECT returned
	dropped     time.Time // when the table was first seen gone
	maxRead     time.Duration
	maxWrite    time.Duration
	reads       int
	writes      int
}

// withTraffic starts the long SELECT (hold long) on table, readers of it and writers into
// sink, then calls during; it returns once the table is gone (or after a minute).
func withTraffic(t *testing.T, e *env, db, table, sink string, hold time.Duration, during func()) *traffic {
	t.Helper()
	tr := &traffic{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	long := e.conn(db, pgcluster.Superuser)
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(started)
		_, err := long.Exec(ctx, `SELECT pg_sleep($1), count(*) FROM `+table, hold.Seconds())
		mu.Lock()
		tr.selectEnded = time.Now()
		mu.Unlock()
		if err != nil {
			t.Errorf("long SELECT: %v", err)
		}
	}()
	<-started
	// The SELECT must hold its lock before the drop is asked for.
	probe := e.conn(db, pgcluster.Superuser)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var holding bool
		if err := probe.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = to_regclass($1) AND granted)`, table).Scan(&holding); err != nil {
			t.Fatal(err)
		}
		if holding {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long SELECT never took its lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Each statement reports how long it took on the server, lock waits included: the bound
	// is about the server making sessions queue, not about this machine's scheduling under
	// the race detector.
	loop := func(sql string, max *time.Duration, n *int) {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, e.cluster.DSN(db, pgcluster.Superuser))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for {
			select {
			case <-stop:
				return
			default:
			}
			var took time.Duration
			// One simple-protocol message: statement_timestamp() is when the server received
			// it, before any lock was waited for.
			err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&took)
			if err != nil {
				return // the table is gone
			}
			mu.Lock()
			*max = maxDur(*max, took)
			*n++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}
	wg.Add(2)
	go loop(`SELECT clock_timestamp() - statement_timestamp() FROM (SELECT count(*) FROM `+table+`) c`, &tr.maxRead, &tr.reads)
	go loop(`INSERT INTO `+sink+` VALUES (1) RETURNING clock_timestamp() - statement_timestamp()`, &tr.maxWrite, &tr.writes)

	during()
	deadline = time.Now().Add(time.Minute)
	for {
		var gone bool
		if err := probe.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, table).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		if gone {
			tr.dropped = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the table was never dropped")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return tr
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// margin is what a statement may take on the server beyond the lock timeout on a loaded test machine.
const margin = 150 * time.Millisecond

func (tr *traffic) check(t *testing.T, lockTimeout time.Duration) {
	t.Helper()
	after := tr.dropped.Sub(tr.selectEnded)
	t.Logf("dropped %s after the long SELECT ended; longest read %s (%d reads), longest write %s (%d writes); lock timeout %s",
		after, tr.maxRead, tr.reads, tr.maxWrite, tr.writes, lockTimeout)
	if tr.dropped.Before(tr.selectEnded) {
		t.Errorf("the table was dropped %s before the SELECT using it ended", -after)
	}
	if after > time.Second {
		t.Errorf("the drop came %s after the last query ended, want under 1s", after)
	}
	if tr.maxRead > lockTimeout+margin || tr.maxWrite > lockTimeout+margin {
		t.Errorf("a statement waited %s (read) / %s (write), more than the lock timeout %s (+%s)", tr.maxRead, tr.maxWrite, lockTimeout, margin)
	}
	if tr.reads < 20 || tr.writes < 20 {
		t.Errorf("too little traffic to tell: %d reads, %d writes", tr.reads, tr.writes)
	}
}

// `deckhand drop` of a table a long SELECT uses: the job waits without making readers of the
// table or writers elsewhere queue longer than the lock timeout, and drops the table within a
// second of the SELECT ending.
func TestDropWaitsForQueries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, `CREATE TABLE victim AS SELECT g AS id FROM generate_series(1, 1000) g; CREATE TABLE sink (v int)`)
	e.worker([]engine.Feature{drop.Feature()})
	var id int64
	tr := withTraffic(t, e, db, "victim", "sink", 1500*time.Millisecond, func() {
		out := e.run("drop", "--node", "n1", "public.victim")
		var err error
		if id, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
			t.Fatalf("deckhand drop printed %q, want the job id", out)
		}
	})
	tr.check(t, cleanup.DefaultLockTimeout)
	job := e.Wait(id, 30*time.Second)
	if job.State != deckhandtype.JobFinished {
		t.Fatalf("drop job %s", job.State)
	}
	if d, _ := e.Client.Job(ctx, id); d.Tasks[0].Attempts != 1 {
		t.Errorf("the drop took %d attempts: waiting for a query must not cost attempts", d.Tasks[0].Attempts)
	}
}

// The cleaner's deferred drop: a deferred_on_success record of a succeeded operation whose
// table a long SELECT uses is removed within a second of the SELECT ending, and while it is
// pending nobody waits longer than the lock timeout (here 200ms, from the catalog setting).
func TestDeferredDropWaitsForQueries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, `CREATE TABLE old_copy AS SELECT g AS id FROM generate_series(1, 1000) g; CREATE TABLE sink (v int)`)
	if err := e.Client.SetSetting(ctx, cleanup.LockTimeoutSetting, "200ms"); err != nil {
		t.Fatal(err)
	}
	// Production intervals: the point is the default latency.
	leader := cleanup.New(e.Client.Catalog(), pools(t))
	leader.Logger = quiet()
	r := e.opRunner(leader)
	var id int64
	tr := withTraffic(t, e, db, "old_copy", "sink", 1500*time.Millisecond, func() {
		id = r.start(func(ctx context.Context, op *cleanup.Operation) error {
			if _, err := op.Register(ctx, cleanup.Table("n1", "public", "old_copy"), cleanup.DeferredOnSuccess); err != nil {
				return err
			}
			return op.Succeed(ctx)
		})
	})
	tr.check(t, 200*time.Millisecond)
	// The table is gone on the node a moment before the cleaner records it in the catalog.
	rec := e.records(id)[0]
	for deadline := time.Now().Add(5 * time.Second); rec.State != deckhandtype.CleanupRemoved && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		rec = e.records(id)[0]
	}
	if rec.State != deckhandtype.CleanupRemoved || rec.Attempts < 2 {
		t.Errorf("record %s after %d attempts; want removed after at least one attempt found it in use", rec.State, rec.Attempts)
	}
}

// `deckhand drop` of a table the submitter may not drop fails at once — one attempt, no
// waiting — with PostgreSQL's reason, and drops nothing.
func TestDropWithoutPrivilegeFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pgtest.Shared(t))
	db := e.node("n1")
	e.exec(db, `CREATE TABLE precious (id int); CREATE TABLE mine (id int)`)
	role := e.Role("dropper")
	quoted := pgx.Identifier{role}.Sanitize()
	// The role may use the catalog (it submits as itself) and owns one table on the node.
	e.Exec("postgres", `GRANT deckhand_submitter TO `+quoted)
	e.exec(db, `ALTER TABLE mine OWNER TO `+quoted)
	e.worker([]engine.Feature{drop.Feature()})
	asRole := e.Cluster.DSN(e.DB, role)

	began := time.Now()
	code, out, errOut := deckhandAs(t, asRole, "drop", "--node", "n1", "--wait", "public.mine", "public.precious")
	if code != 1 || !strings.Contains(errOut, "must be owner of table precious") || !strings.Contains(errOut, "42501") {
		t.Fatalf("drop without privilege: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the refusal took %s; it should be immediate", took)
	}
	id, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	d, err := e.Client.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.SubmittedBy != role || d.Tasks[0].Attempts != 1 || d.Tasks[0].LastError.SQLState != "42501" {
		t.Errorf("job by %s: %d attempts, last error %v; want one attempt failing with 42501", d.SubmittedBy, d.Tasks[0].Attempts, d.Tasks[0].LastError)
	}
	if !e.tableExists(db, "precious") {
		t.Error("a table the role may not drop was dropped")
	}
	// Its own table goes, as that role.
	if code, out, errOut := deckhandAs(t, asRole, "drop", "--node", "n1", "--wait", "mine"); code != 0 || e.tableExists(db, "mine") {
		t.Errorf("dropping its own table: exit %d %s %s", code, out, errOut)
	}
	// A table that does not exist is refused before anything is dropped.
	if code, _, errOut := deckhandAs(t, asRole, "drop", "--node", "n1", "--wait", "nosuch", "precious"); code != 1 || !strings.Contains(errOut, `table "nosuch" does not exist`) {
		t.Errorf("dropping a missing table: exit %d %s", code, errOut)
	}
}

func deckhandAs(t *testing.T, catalogDSN string, args ...string) (int, string, string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	code := cliMain(c, append([]string{"--catalog", catalogDSN}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestParseQualifiedName(t *testing.T) {
	for in, want := range map[string]string{
		`t`:               `"t"`,
		`Public.T`:        `"public"."t"`,
		`"My Schema"."T"`: `"My Schema"."T"`,
		`s."a""b"`:        `"s"."a""b"`,
	} {
		got, err := nodeconn.ParseQualifiedName(in)
		if err != nil || got.Sanitize() != want {
			t.Errorf("ParseQualifiedName(%q) = %s, %v; want %s", in, got.Sanitize(), err, want)
		}
	}
	for _, bad := range []string{``, `a.b.c`, `a;drop table x`, `"unterminated`, `a.`, `a b`} {
		if _, err := nodeconn.ParseQualifiedName(bad); err == nil {
			t.Errorf("ParseQualifiedName(%q) accepted", bad)
		}
	}
}
