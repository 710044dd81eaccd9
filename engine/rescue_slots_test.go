package engine

import (
	"fmt"
	"slices"
	"testing"
)

// Nodes found unreachable at their last try take half of the rescue slots at most, and every
// round tries the nodes never found unreachable first, then the others from the one tried
// longest ago: an outage of many nodes never keeps the leader from rescuing the rest.
func TestRescueSlotsLeaveRoomForReachableNodes(t *testing.T) {
	var r rescues
	for i := range rescueConcurrency {
		node := fmt.Sprintf("down%02d", i)
		if !r.start(node) {
			t.Fatalf("%s found no slot with none taken", node)
		}
		r.done(node, true)
	}
	started := 0
	for i := range rescueConcurrency {
		if r.start(fmt.Sprintf("down%02d", i)) {
			started++
		}
	}
	if started != rescueConcurrency/2 {
		t.Fatalf("%d nodes found unreachable started again, want %d", started, rescueConcurrency/2)
	}
	for i := range rescueConcurrency / 2 {
		if node := fmt.Sprintf("up%02d", i); !r.start(node) {
			t.Fatalf("%s found no slot while unreachable nodes held %d", node, started)
		}
	}
	if r.start("one-more") {
		t.Fatalf("a rescue started beyond the %d slots", rescueConcurrency)
	}
	if r.start("up00") {
		t.Fatal("a second rescue started on a node whose rescue runs")
	}
	nodes := []string{"down03", "fresh", "down01"}
	r.order(nodes)
	if want := []string{"fresh", "down01", "down03"}; !slices.Equal(nodes, want) {
		t.Errorf("order %v, want %v: never unreachable first, then the one found unreachable longest ago", nodes, want)
	}
	r.done("down01", false)
	again := []string{"down03", "down01"}
	if r.order(again); again[0] != "down01" {
		t.Errorf("order %v: a node reached again is no longer put last", again)
	}
}
