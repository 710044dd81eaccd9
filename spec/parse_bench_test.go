package spec

import (
	"encoding/json"
	"strconv"
	"testing"
)

// BenchmarkParseBigJob reads the spec of a fan-out/fan-in of 100,000 SQL tasks (one task, the
// rest but one depending on it, the last depending on all of those), as `job submit` does:
//
//	go test ./spec -run '^$' -bench ParseBigJob -benchmem
func BenchmarkParseBigJob(b *testing.B) {
	const n = 100000
	job := Job{Description: "fan-out/fan-in", Tasks: make([]Task, n)}
	var all []string
	for i := range n {
		name := "t" + strconv.Itoa(i)
		job.Tasks[i] = Task{Name: name, Node: "n1", SQL: "SELECT 1"}
		switch {
		case i == n-1:
			job.Tasks[i].DependsOn = all
		case i > 0:
			job.Tasks[i].DependsOn = []string{"t0"}
			all = append(all, name)
		}
	}
	data, err := json.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got, err := Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Tasks) != n || len(got.Tasks[n-1].DependsOn) != n-2 {
			b.Fatalf("read %d tasks", len(got.Tasks))
		}
	}
}
