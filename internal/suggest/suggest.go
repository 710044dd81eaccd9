// Package suggest finds the name a misspelt one was most likely meant to be.
package suggest

import "strings"

// Closest returns the known name closest to a misspelt one (case, '_', '-' and spaces aside,
// at most two edits away), or "" when none is close.
func Closest(name string, known []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", 3 // accept at most 2 edits
	n := norm(name)
	for _, k := range known {
		// Lengths more than two apart are more than two edits apart: a name of megabytes
		// costs no comparison.
		if nk := norm(k); len(n) <= len(nk)+2 && len(nk) <= len(n)+2 {
			d := editDistance(n, nk)
			if d < bestDist && 2*d <= len(name) {
				best, bestDist = k, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
