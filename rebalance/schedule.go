package rebalance

// Step is a planned move with the moves it must wait for, by index in the plan.
type Step struct {
	Move
	DependsOn []int `json:"depends_on"`
	// The lanes of the source's and the target's primaries the move takes.
	SourceLane int `json:"source_lane"`
	TargetLane int `json:"target_lane"`
}

// Schedule orders the plan's moves into a graph that a job runs with as much parallelism as
// the primaries allow, and no more:
//
//   - a group sends before it receives (as Citus' rebalancer orders its moves): a move into
//     group G waits for every move out of G planned before it, so that a group never holds
//     its incoming and outgoing data at once;
//   - each group's primary takes part in at most lanes[group] moves at once (its max_tasks,
//     at least 1): it has that many lanes, every move takes one lane of its source and one of
//     its target — the one used least recently — and waits for the move before it in both.
//
// Moves run as their own tasks with no node of their own (they reach both primaries), so the
// lanes, not the engine's per-node limit, bound them.
func Schedule(moves []Move, lanes map[string]int) []Step {
	last := map[string][]int{} // group → lane → index of the last move in it, -1: none
	lane := func(g string) []int {
		if last[g] == nil {
			n := max(lanes[g], 1)
			last[g] = make([]int, n)
			for i := range last[g] {
				last[g][i] = -1
			}
		}
		return last[g]
	}
	leastRecent := func(ls []int) int {
		best := 0
		for i, v := range ls {
			if v < ls[best] {
				best = i
			}
		}
		return best
	}
	steps := make([]Step, len(moves))
	for i, m := range moves {
		src, dst := lane(m.From), lane(m.To)
		s := Step{Move: m, SourceLane: leastRecent(src), TargetLane: leastRecent(dst)}
		deps := map[int]bool{}
		if prev := src[s.SourceLane]; prev >= 0 {
			deps[prev] = true
		}
		if prev := dst[s.TargetLane]; prev >= 0 {
			deps[prev] = true
		}
		for j := range i {
			if moves[j].From == m.To {
				deps[j] = true
			}
		}
		for j := range i { // in plan order, so the graph reads as the plan
			if deps[j] {
				s.DependsOn = append(s.DependsOn, j)
			}
		}
		src[s.SourceLane], dst[s.TargetLane] = i, i
		steps[i] = s
	}
	return steps
}
