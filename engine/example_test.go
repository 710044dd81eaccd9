package engine_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/spec"
)

var (
	exampleOnce    sync.Once
	exampleCluster *pgcluster.Cluster
)

// exampleCatalog returns the conninfo of a fresh, initialised catalog database and of a node
// database; in real use these are your own servers.
func exampleCatalog(name string) (catalogDSN, nodeDSN string) {
	ctx := context.Background()
	exampleOnce.Do(func() {
		var err error
		if exampleCluster, err = pgcluster.Start(ctx, pgcluster.Options{}); err != nil {
			log.Fatal(err)
		}
	})
	for _, db := range []string{name, name + "_node"} {
		if err := exampleCluster.CreateDatabase(ctx, db); err != nil {
			log.Fatal(err)
		}
	}
	catalogDSN = exampleCluster.DSN(name, pgcluster.Superuser)
	cat, err := catalog.Open(ctx, catalogDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer cat.Close()
	if _, err := cat.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return catalogDSN, exampleCluster.DSN(name+"_node", pgcluster.Superuser)
}

// Submit a small DAG, run it with a worker, and wait for it.
func Example() {
	ctx := context.Background()
	catalogDSN, nodeDSN := exampleCatalog("example_dag")

	client, err := engine.Open(ctx, catalogDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.AddNode(ctx, deckhandtype.Node{Name: "n1", DSN: nodeDSN, MaxTasks: 2}); err != nil {
		log.Fatal(err)
	}

	noTx := false
	id, err := client.Submit(ctx, &spec.Job{
		Description: "create, load and index a table",
		Tasks: []spec.Task{
			{Name: "create", Node: "n1", SQL: "CREATE TABLE t (id int)"},
			{Name: "load", Node: "n1", SQL: "INSERT INTO t SELECT generate_series(1, 1000)", DependsOn: []string{"create"}},
			{Name: "index", Node: "n1", SQL: "CREATE INDEX CONCURRENTLY ON t (id)", Transaction: &noTx, DependsOn: []string{"load"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	// A worker normally runs in its own process (deckhand serve); here it shares ours, on a
	// catalog connection of its own.
	workerClient, err := engine.Open(ctx, catalogDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer workerClient.Close()
	workerCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := engine.NewWorker(workerClient.Catalog(), engine.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		w.Run(workerCtx) //nolint:errcheck
	}()
	defer func() { stop(); <-done }()

	job, err := client.Wait(ctx, id, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, job.TasksDone, "of", job.TasksTotal)
	// Output: finished 3 of 3
}

// Submitting a spec with a dependency cycle is refused before anything is written.
func ExampleClient_Submit_invalid() {
	ctx := context.Background()
	catalogDSN, _ := exampleCatalog("example_invalid")
	client, err := engine.Open(ctx, catalogDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	_, err = client.Submit(ctx, &spec.Job{Tasks: []spec.Task{
		{Name: "a", Kind: spec.KindNoop, DependsOn: []string{"b"}},
		{Name: "b", Kind: spec.KindNoop, DependsOn: []string{"a"}},
	}})
	fmt.Println(err, engine.IsInvalid(err))
	// Output: dependency cycle: a -> b -> a true
}
