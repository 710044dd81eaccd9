package catalog

import (
	"fmt"
	"sync/atomic"
	"time"
)

// claimSets are the sets of runnable tasks a claim takes from, as bits. The statement that
// locks the nodes finds which of them have runnable tasks (claimSetsSQL) and leaves that in
// the transaction's settings; the claim statement is then one reduced to those sets
// (claimSQLFor), chosen before the round trip from what the worker's claims found lately
// (seenSets).
type claimSets uint8

const (
	setAnywhere     claimSets = 1 << iota // tasks that run anywhere
	setNodes                              // tasks bound to a node, export coordinators aside
	setCoordinators                       // export coordinators, bound to a node
	setGroups                             // tasks dealt over the members of a node group
	allSets         = setAnywhere | setNodes | setCoordinators | setGroups
)

// normalized is s with what its parts need: tasks dealt to groups go to members' free slots,
// which the parts of both node-bound sets count.
func (s claimSets) normalized() claimSets {
	if s&setGroups != 0 {
		s |= setNodes | setCoordinators
	}
	return s & allSets
}

// claimStatements are the claim statements by normalized set (none for the empty set: a claim
// that expects no work runs no claim statement).
var claimStatements = func() map[claimSets]named {
	m := map[claimSets]named{}
	for s := claimSets(1); s <= allSets; s++ {
		if n := s.normalized(); m[n].sql == "" {
			m[n] = mustNamed(claimSQLFor(n))
		}
	}
	return m
}()

// claimSetsSQL is, in the statement that locks the nodes, the sets that have runnable tasks,
// whether or not they wait out a backoff: one probe of each set's index (0005 and later). The
// node-bound sets count wherever the tasks are, not only on the nodes locked: a set is left out
// of the claim only when it has nothing runnable at all.
var claimSetsSQL = fmt.Sprintf(`(CASE WHEN EXISTS (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node IS NULL AND t.node_group IS NULL) THEN %d ELSE 0 END
	| CASE WHEN EXISTS (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.node IS NOT NULL AND t.kind <> 'export') THEN %d ELSE 0 END
	| CASE WHEN EXISTS (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NULL AND t.kind = 'export' AND t.node IS NOT NULL) THEN %d ELSE 0 END
	| CASE WHEN EXISTS (SELECT FROM deckhand.task t
		WHERE t.state = 'runnable' AND t.node_group IS NOT NULL) THEN %d ELSE 0 END)`,
	setAnywhere, setNodes, setCoordinators, setGroups)

// claimSetsMemory is how long a set stays in a worker's claim statement after its claims last
// found work there. Work that comes and goes between claims (a chain's next task, released by
// the completion that carries the claim, while tasks run on nodes beside it) so keeps its set
// in the statement, rather than cost a second transaction each time it comes back; an idle
// worker drops to claims without a statement within this long.
const claimSetsMemory = time.Second

// seenSets remembers when a worker's claims last found work in each set.
type seenSets struct {
	claimed atomic.Bool     // a claim has run: until then every set counts
	at      [4]atomic.Int64 // by bit of claimSets: unix nanoseconds
}

// recent is the sets found within claimSetsMemory of now, normalized; every set before the
// first claim.
func (m *seenSets) recent(now time.Time) claimSets {
	if !m.claimed.Load() {
		return allSets
	}
	var s claimSets
	for i := range m.at {
		if now.UnixNano()-m.at[i].Load() < int64(claimSetsMemory) {
			s |= 1 << i
		}
	}
	return s.normalized()
}

// note records what a claim at now found.
func (m *seenSets) note(found claimSets, now time.Time) {
	for i := range m.at {
		if found&(1<<i) != 0 {
			m.at[i].Store(now.UnixNano())
		}
	}
	m.claimed.Store(true)
}
