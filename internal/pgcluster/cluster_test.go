package pgcluster_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

func TestStandbyReplayAndPause(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	primary := pgtest.Shared(t)
	db := pgtest.NewDatabase(t)
	if err := primary.Exec(ctx, db, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	standby := pgtest.NewStandby(t, primary, pgcluster.Options{})
	if standby.Port == primary.Port || standby.Primary != primary {
		t.Fatalf("standby port %d primary %v", standby.Port, standby.Primary)
	}
	if in, err := standby.IsStandby(ctx); err != nil || !in {
		t.Fatalf("standby in recovery: %v %v", in, err)
	}

	count := func() int {
		t.Helper()
		conn := pgtest.Connect(t, standby.DSN(db, pgcluster.Superuser))
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := primary.Exec(ctx, db, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("standby sees %d rows after replaying %s, want 1", n, lsn)
	}

	if err := standby.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, db, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	lsn2, err := primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Received but held back: the row must stay invisible for as long as replay is paused.
	if err := standby.WaitReceived(ctx, lsn2); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("standby sees %d rows while paused, want 1", n)
	}
	if replayed, err := standby.ReplayLSN(ctx); err != nil || replayed >= lsn2 {
		t.Fatalf("replayed %s (err %v) while paused, primary at %s", replayed, err, lsn2)
	}
	if err := standby.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.WaitReplayed(ctx, lsn2); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("standby sees %d rows after resume, want 2", n)
	}
}

func TestKillRestart(t *testing.T) {
	ctx := pgtest.Context(t, 2*time.Minute)
	c := pgtest.New(t, pgcluster.Options{Durable: true, Settings: map[string]string{"work_mem": "8MB"}})
	if err := c.Exec(ctx, "postgres", "CREATE TABLE t (v int); INSERT INTO t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, c.DSN("postgres", pgcluster.Superuser))
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}

	c.Kill()
	// Kill returns once the backends are gone too, so that Restart cannot trip over them.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", backend)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Fatalf("backend %d survived Kill: %s", backend, stat)
	}
	if c.Running() {
		t.Fatal("still running after Kill")
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection survived Kill")
	}
	if _, err := os.Stat(c.DataDir); err != nil {
		t.Fatalf("Kill removed files: %v", err)
	}
	port := c.Port
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port != port {
		t.Fatalf("port changed from %d to %d", port, c.Port)
	}
	conn2 := pgtest.Connect(t, c.DSN("postgres", pgcluster.Superuser))
	var v int
	var workMem, fsync string
	if err := conn2.QueryRow(ctx, "SELECT v, current_setting('work_mem'), current_setting('fsync') FROM t").Scan(&v, &workMem, &fsync); err != nil {
		t.Fatal(err)
	}
	if v != 7 || workMem != "8MB" || fsync != "on" {
		t.Fatalf("after crash recovery: v=%d work_mem=%s fsync=%s", v, workMem, fsync)
	}
	if !strings.Contains(c.LogTail(200), "not properly shut down") {
		t.Errorf("no crash recovery in the log:\n%s", c.LogTail(20))
	}

	// A restart of a running server is a clean one.
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "postgres", "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	// Shutdown stops the server and keeps its files; Restart starts it again.
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Fatal("still running after Shutdown")
	}
	if err := c.Exec(ctx, "postgres", "SELECT 1"); err == nil {
		t.Fatal("a query succeeded after Shutdown")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "postgres", "SELECT v FROM t"); err != nil {
		t.Fatalf("after Shutdown and Restart: %v", err)
	}
	if strings.Count(c.LogTail(400), "not properly shut down") != 1 {
		t.Errorf("Shutdown was not a clean stop:\n%s", c.LogTail(20))
	}

	dir := c.Dir
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s still there after Stop: %v", dir, err)
	}
	if err := c.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	ctx := pgtest.Context(t, time.Minute)
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil {
		c.Stop()
		t.Fatal("started with a bogus setting")
	}
	if !strings.Contains(err.Error(), `"shared_buffers"`) {
		t.Fatalf("error lacks the server log: %v", err)
	}
	if _, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"a\nb": "1"}}); err == nil {
		t.Fatal("accepted a setting name with a newline")
	}
}
