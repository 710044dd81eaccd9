package rebalance

import (
	"cmp"
	"slices"
)

// Schema is a candidate for moving: where it lives and how big it is.
type Schema struct {
	Name  string `json:"schema"`
	Group string `json:"group"`
	Bytes int64  `json:"bytes"`
}

// Move moves one schema from a group to another.
type Move struct {
	Schema string `json:"schema"`
	From   string `json:"from"`
	To     string `json:"to"`
	Bytes  int64  `json:"bytes"`
}

// Plan is what a rebalance would do: the moves in the order they were chosen, and the bytes
// each group holds before and after them.
type Plan struct {
	Threshold float64          `json:"threshold"` // a fraction of the mean: 0.1 is 10%
	Mean      float64          `json:"mean_bytes"`
	Before    map[string]int64 `json:"before"`
	After     map[string]int64 `json:"after"`
	Moves     []Move           `json:"moves"`
	Balanced  bool             `json:"balanced"` // every group ends within the threshold of the mean
}

// Bounds are the loads within the threshold of the mean.
func (p Plan) Bounds() (low, high float64) {
	return p.Mean * (1 - p.Threshold), p.Mean * (1 + p.Threshold)
}

// PlanMoves plans the moves that bring every group within threshold (a fraction) of the mean
// load, greedily: from the most loaded group, its largest schema that fits, to the least
// loaded group that can take it. A move never overshoots — its target gets at most the upper
// bound — and always narrows the spread (it moves less than the two groups differ by, so the
// source keeps more than the target had), so the plan ends; a source that drops below the
// lower bound receives smaller schemas later. Each schema moves at most once. Planning stops
// when every group is within the threshold, or no move helps; when the greedy ends short of
// the threshold, the plans that start with one of its other candidate moves are tried (see
// search). Schemas of groups not in groups are ignored.
func PlanMoves(groups []string, schemas []Schema, threshold float64) Plan {
	load := make(map[string]int64, len(groups))
	for _, g := range groups {
		load[g] = 0
	}
	var bySize []Schema // largest first: the greedy tries big moves before small ones
	var total int64
	for _, s := range schemas {
		if _, ok := load[s.Group]; ok && s.Bytes >= 0 {
			load[s.Group] += s.Bytes
			total += s.Bytes
			bySize = append(bySize, s)
		}
	}
	slices.SortStableFunc(bySize, func(a, b Schema) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Name, b.Name))
	})
	p := Plan{Threshold: threshold, Before: copyLoads(load)}
	if len(groups) > 0 {
		p.Mean = float64(total) / float64(len(groups))
	}
	low, high := p.Bounds()
	st := &state{load: load, moved: map[string]bool{}, bySize: bySize, groups: groups, low: low, high: high}
	best := st.search(lookaheadDepth)
	p.Moves, p.After, p.Balanced = best.moves, copyLoads(best.load), best.within()
	return p
}

// When the greedy plan does not balance the groups, search tries up to lookahead other moves
// at each of the first lookaheadDepth steps.
const (
	lookahead      = 16
	lookaheadDepth = 1
)

// search is the greedy plan from st if it balances the groups; else the first plan that does
// among those that start with another move the greedy would make (in its order of preference),
// each planned the same way with one step less to search; else the greedy plan.
//
// The greedy alone can paint itself into a corner: a group left above the bounds with only
// schemas too big for any other group's room, which an earlier move into an emptier group
// would have taken.
func (st *state) search(depth int) *state {
	best := st.clone()
	best.greedy()
	if best.within() || depth == 0 {
		return best
	}
	for _, first := range st.candidates(lookahead) {
		alt := st.clone()
		alt.apply(first)
		if alt = alt.search(depth - 1); alt.within() {
			return alt
		}
	}
	return best
}

// state is a plan under way: the groups' loads after its moves.
type state struct {
	load      map[string]int64
	moved     map[string]bool // schema names (with their first group) that moved already
	moves     []Move
	bySize    []Schema
	groups    []string
	low, high float64
}

func (st *state) clone() *state {
	c := *st
	c.load, c.moved, c.moves = copyLoads(st.load), make(map[string]bool, len(st.moved)), slices.Clone(st.moves)
	for k := range st.moved {
		c.moved[k] = true
	}
	return &c
}

func (st *state) within() bool {
	for _, l := range st.load {
		if float64(l) < st.low || float64(l) > st.high {
			return false
		}
	}
	return true
}

func (st *state) apply(m Move) {
	st.moved[m.Schema+"\x00"+m.From] = true
	st.load[m.From] -= m.Bytes
	st.load[m.To] += m.Bytes
	st.moves = append(st.moves, m)
}

// greedy applies the preferred move until the groups are within the bounds or no move helps.
func (st *state) greedy() {
	for !st.within() {
		c := st.candidates(1)
		if len(c) == 0 {
			return
		}
		st.apply(c[0])
	}
}

// candidates are the first limit moves that help, in the greedy's order of preference: sources from the
// most loaded, targets from the least, for each pair the source's largest schema that fits.
// One of the two groups must be out of the bounds; the target must stay within the upper
// bound; the move must be smaller than the two groups differ by.
func (st *state) candidates(limit int) []Move {
	load := st.load
	order := slices.Clone(st.groups)
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Or(cmp.Compare(load[b], load[a]), cmp.Compare(a, b)) })
	var out []Move
	for _, src := range order {
		for i := len(order) - 1; i >= 0; i-- {
			dst := order[i]
			if load[dst] >= load[src] {
				break
			}
			if float64(load[src]) <= st.high && float64(load[dst]) >= st.low {
				continue // both within the bounds: moving between them helps no group out of them
			}
			for _, s := range st.bySize {
				if s.Group != src || st.moved[s.Name+"\x00"+s.Group] || s.Bytes == 0 {
					continue
				}
				if float64(load[dst]+s.Bytes) <= st.high && s.Bytes < load[src]-load[dst] {
					if out = append(out, Move{Schema: s.Name, From: src, To: dst, Bytes: s.Bytes}); len(out) == limit {
						return out
					}
				}
			}
		}
	}
	return out
}

func copyLoads(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
