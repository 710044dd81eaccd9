package catalog

import "fmt"

// claimSets are the sets of runnable tasks a claim takes from, as bits. The statement that
// locks the nodes finds which of them have runnable tasks (claimSetsSQL) and leaves that in
// the transaction's settings; the claim statement is then one reduced to those sets
// (claimSQLFor), chosen before the round trip from what the worker's previous claim found.
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
