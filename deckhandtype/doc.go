// Package deckhandtype holds the types that deckhand's packages share and that programs
// embedding deckhand use: the states of tasks, jobs, attempts, exports, cleanup records and
// operations, and the outcomes of schedule firings; the rows a Client reads (jobs, tasks,
// attempts, nodes, workers, exports, cleanup records, pins, schedules and their firings,
// placements and moves, the progress of running statements and moves, catalog statistics);
// ClaimedTask, what an executor of a task kind is given to run; Backoff, how long workers and
// the cleaner wait before trying again; and LSN, a WAL position. It imports nothing of deckhand.
package deckhandtype
