package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// river runs River's reference benchmark (the bench/rivercmp module) on the bench's server.
type river struct {
	bin     string // the built rivercmp
	dsn     string
	jobs    int
	chain   int
	out     io.Writer
	cleanup func()
	runs    []map[string]string // with one client
	kRuns   []map[string]string // with several clients (Options.Workers)
}

// buildRiver builds the rivercmp module in dir once, so that its runs time River alone.
func buildRiver(ctx context.Context, dir, dsn string, jobs, chain int, out io.Writer) (*river, error) {
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil, fmt.Errorf("%s is not the rivercmp module: %w", dir, err)
	}
	tmp, err := os.MkdirTemp("", "deckhand-rivercmp-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "rivercmp")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("build %s: %w", dir, err)
	}
	return &river{bin: bin, dsn: dsn, jobs: jobs, chain: chain, out: out, cleanup: func() { os.RemoveAll(tmp) }}, nil
}

// run runs River once with the given number of clients — InsertManyFast in batches of 5,000,
// then timed from the first client.Start to the last job done — and keeps its key=value
// summary. Runs with several clients skip the chain: they measure throughput alone.
func (r *river) run(ctx context.Context, when string, clients int) error {
	chain := r.chain
	if clients > 1 {
		chain = 0
	}
	cmd := exec.CommandContext(ctx, r.bin, "--dsn", r.dsn, "--jobs", strconv.Itoa(r.jobs), "--chain", strconv.Itoa(chain),
		"--clients", strconv.Itoa(clients), "--insert-fast")
	cmd.Stderr = r.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "river (%s):\n", when)
	if err := cmd.Start(); err != nil {
		return err
	}
	var last string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		last = sc.Text()
		fmt.Fprintln(r.out, "  "+last)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("rivercmp: %w", err)
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(last) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	if clients > 1 {
		r.kRuns = append(r.kRuns, kv)
	} else {
		r.runs = append(r.runs, kv)
	}
	return nil
}

// mean averages every figure over the runs, keyed as rivercmp names them.
func mean(runs []map[string]string) map[string]float64 {
	sums, counts := map[string]float64{}, map[string]int{}
	for _, run := range runs {
		for k, v := range run {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				sums[k] += f
				counts[k]++
			}
		}
	}
	out := map[string]float64{}
	for k, s := range sums {
		out[k] = s / float64(counts[k])
	}
	return out
}

// keys are m's keys, sorted.
func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
