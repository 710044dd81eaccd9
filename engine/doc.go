/*
Package engine is deckhand's Go API and its small core: a Client submits, watches, controls
and reads jobs; any number of Workers claim and run their tasks; one Worker at a time leads and
does maintenance. All of them coordinate only through the catalog; nothing in memory is
authoritative.

The engine runs two task kinds itself, sql and noop. Everything else is a feature: a package
that hands the engine an engine.Feature with its kinds (how a payload is checked at submission,
what runs a task) and optional leader services. Programs assemble the features they ship and
pass them to Open and NewWorker; the engine never imports a feature.

Data flows one way:

	spec.Job ──Submit──▶ catalog rows ──Claim──▶ Worker ──Executor.Run──▶ Result ──Complete──▶ catalog rows
	                         ▲                                                       │
	                         └──────────── NOTIFY deckhand_runnable ◀────────────────┘

Submit validates the spec, checks nodes and owner roles on the nodes themselves, runs each
kind's own submission check (Kind.Check), and writes the job and its tasks in one
transaction, then notifies the workers.

A Worker runs five loops, beside a listener that turns the notifier's deckhand_runnable and
deckhand_cancel notifications into claims and cancellations (within a budget while they find
nothing, as anyone who may connect to the catalog's database may send them), and a batcher
that records its attempts' node transaction ids in the catalog before they commit:

  - fetch: claims runnable tasks (FOR UPDATE SKIP LOCKED) whenever it is woken — by a
    notification or a resync of the process's notifier (Config.Notifier), by its own
    completions, or by the fallback poll — up to its free concurrency and each node's
    max_tasks;
  - complete: records results in batches; one statement moves the tasks, records the
    attempts, releases dependents and updates the job, so a dependent is claimable the moment
    its prerequisite's result commits;
  - heartbeat: renews the worker's lease, which covers every task it runs, and learns which
    of its tasks are being cancelled, or must be released because their job was paused at once;
  - lead: stands for the leader lease; the leader declares workers with expired leases dead,
    terminates their orphaned backends on the nodes, and hands their tasks back (or fails
    them when attempts are exhausted), probes nodes, and runs the leader services: the
    cleaner, the features' services (such as package schedule's, which submits scheduled
    jobs), and retention (on Config.Clock);
  - progress: every Config.ProgressInterval reads pg_stat_progress_* on the nodes for the
    backends of its running tasks, as each task's owner, and records phase and done/total
    for all of them in one statement.

Every write a worker makes about a task is fenced by the attempt token it got when claiming,
so a worker that lost its lease (paused, partitioned) can never overwrite a newer outcome.
The state machines are drawn and tabled in internal/catalog/state.go; the states themselves
are types of package deckhandtype.
*/
package engine
