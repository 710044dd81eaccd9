// Package deckhandtype holds the types that deckhand's packages share and that programs
// embedding deckhand use: the states of tasks, jobs, attempts, exports, cleanup records and
// operations; the rows a Client reads (jobs, tasks, attempts, nodes, workers, exports,
// cleanup records, pins); ClaimedTask, what an executor of a task kind is given to run;
// Backoff, how long workers and the cleaner wait before trying again; and LSN, a WAL position.
// It imports nothing of deckhand.
package deckhandtype
