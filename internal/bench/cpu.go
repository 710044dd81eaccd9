package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deckhandhq/deckhand/internal/procstat"
)

// cpuMeter reads what a run costs in CPU, by process: the server's sessions of each database,
// the rest of the server, and the bench's own process (deckhand's workers and client). It
// works when the server runs on this machine, where /proc shows its processes. Where a rate
// says how fast the work went, the cost says which process spent the time.
type cpuMeter struct {
	admin      *pgx.Conn
	postmaster int
}

// cpuSample is the CPU the server's processes and the bench's have used up to a moment.
type cpuSample struct {
	byPid map[int]time.Duration // the server's live processes, the postmaster's own included
	dbOf  map[int]string        // their databases ("" for processes of none)
	ended time.Duration         // processes the postmaster started that ended (its children's counter)
	bench time.Duration
}

// cpuCost is what was spent between two samples.
type cpuCost struct {
	byDB  map[string]time.Duration // sessions of each database; "" holds the server's other processes and those that ended
	bench time.Duration
}

// newCPUMeter returns a meter when the server admin is connected to runs on this machine, and
// nil when it cannot tell (a remote server, another PID namespace): the session's backend is
// a postgres process here, and CPU it burns on purpose shows in that process's counter.
func newCPUMeter(ctx context.Context, admin *pgx.Conn) *cpuMeter {
	var pid int
	if err := admin.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&pid); err != nil {
		return nil
	}
	before, ok := procstat.Of(pid)
	if !ok || before.Command != "postgres" {
		return nil
	}
	var n int64
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.generate_series(1, 3000000)`).Scan(&n); err != nil {
		return nil
	}
	after, ok := procstat.Of(pid)
	if !ok || after.CPU-before.CPU < 50*time.Millisecond {
		return nil
	}
	return &cpuMeter{admin: admin, postmaster: after.Parent}
}

// sample reads the counters of the server's processes (those pg_stat_activity lists, and the
// postmaster) and of this one.
func (m *cpuMeter) sample(ctx context.Context) (cpuSample, error) {
	rows, err := m.admin.Query(ctx, `SELECT pid, coalesce(datname, '') FROM pg_catalog.pg_stat_activity`)
	if err != nil {
		return cpuSample{}, err
	}
	dbOf, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		pid int
		db  string
	}, error) {
		var v struct {
			pid int
			db  string
		}
		return v, r.Scan(&v.pid, &v.db)
	})
	if err != nil {
		return cpuSample{}, err
	}
	s := cpuSample{byPid: map[int]time.Duration{}, dbOf: map[int]string{}, bench: procstat.Self()}
	pm, ok := procstat.Of(m.postmaster)
	if !ok {
		return cpuSample{}, fmt.Errorf("the server's postmaster (pid %d) is gone", m.postmaster)
	}
	s.byPid[m.postmaster], s.ended = pm.CPU, pm.Children
	for _, p := range dbOf {
		// A session that ended since the list was read is counted with the ended ones.
		if st, ok := procstat.Of(p.pid); ok && st.Parent == m.postmaster {
			s.byPid[p.pid], s.dbOf[p.pid] = st.CPU, p.db
		}
	}
	return s, nil
}

// since is what was spent from s0 to s. A process that ended in between is counted, with its
// whole life, among those that ended (once the postmaster has waited for it), under "".
func (s cpuSample) since(s0 cpuSample) cpuCost {
	c := cpuCost{byDB: map[string]time.Duration{}, bench: s.bench - s0.bench}
	for pid, used := range s.byPid {
		c.byDB[s.dbOf[pid]] += used - s0.byPid[pid] // 0 for a process that started meanwhile
	}
	c.byDB[""] += s.ended - s0.ended
	for pid, used := range s0.byPid {
		if _, alive := s.byPid[pid]; !alive {
			c.byDB[""] -= used // already counted in ended, whole: only what came after s0 is this run's
		}
	}
	return c
}

// total is everything the run cost on this machine that the meter sees.
func (c cpuCost) total() time.Duration {
	t := c.bench
	for _, d := range c.byDB {
		t += d
	}
	return t
}

// perTask is d spread over n tasks, in microseconds.
func perTask(d time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

// sqlCost is the CPU a run of SQL tasks cost per task, by process.
type sqlCost struct {
	TotalUS, NodeUS, CatalogUS, ServerOtherUS, BenchUS float64
}

func newSQLCost(c cpuCost, tasks int, catalogDB, nodeDB string) sqlCost {
	other := c.byDB[""]
	for db, d := range c.byDB {
		if db != "" && db != catalogDB && db != nodeDB {
			other += d
		}
	}
	return sqlCost{TotalUS: perTask(c.total(), tasks), NodeUS: perTask(c.byDB[nodeDB], tasks),
		CatalogUS: perTask(c.byDB[catalogDB], tasks), ServerOtherUS: perTask(other, tasks), BenchUS: perTask(c.bench, tasks)}
}

func (s sqlCost) String() string {
	return fmt.Sprintf("%.0f µs of CPU per task: the node's sessions %.0f, the catalog's %.0f, the server's other processes %.0f, "+
		"deckhand (workers and client) %.0f; %d CPUs here", s.TotalUS, s.NodeUS, s.CatalogUS, s.ServerOtherUS, s.BenchUS, runtime.NumCPU())
}

// sqlCPU measures SQL runs: the meter (nil when the server is elsewhere) and the databases of
// the catalog and of the SQL node.
type sqlCPU struct {
	meter             *cpuMeter
	catalogDB, nodeDB string
}

// start samples the counters; the function it returns samples them again and gives the cost
// of the tasks run in between, or nil when it cannot be read.
func (c *sqlCPU) start(ctx context.Context) func(tasks int) *sqlCost {
	if c == nil || c.meter == nil {
		return func(int) *sqlCost { return nil }
	}
	before, err := c.meter.sample(ctx)
	return func(tasks int) *sqlCost {
		if err != nil {
			return nil
		}
		after, err := c.meter.sample(ctx)
		if err != nil {
			return nil
		}
		cost := newSQLCost(after.since(before), tasks, c.catalogDB, c.nodeDB)
		return &cost
	}
}

// dbName is the database dsn connects to.
func dbName(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// sessionsEnded waits, up to two seconds, until no session of database db is left and the
// postmaster has waited for them, then samples: what they used is then in its counter of
// processes that ended.
func (m *cpuMeter) sessionsEnded(ctx context.Context, db string) (cpuSample, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		var left int
		if err := m.admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = $1`, db).Scan(&left); err != nil {
			return cpuSample{}, err
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A session leaves pg_stat_activity just before its process exits and is waited for.
	time.Sleep(100 * time.Millisecond)
	return m.sample(ctx)
}
