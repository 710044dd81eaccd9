package spec

import (
	"runtime"
	"strings"
	"testing"
)

// TestAttackYAMLAliasesCannotExhaustMemory: a spec of about a megabyte whose aliases repeat an
// anchored string a hundred times would become over a hundred megabytes of JSON (gigabytes
// from the API's 8 MiB); it is refused before anything expands it.
func TestAttackYAMLAliasesCannotExhaustMemory(t *testing.T) {
	var b strings.Builder
	b.WriteString("description: bomb\ntasks:\n- name: t0\n  node: n1\n  sql: &s \"select '" + strings.Repeat("x", 1<<20) + "'\"\n")
	for i := 1; i < 100; i++ {
		b.WriteString("- {name: t" + strings.Repeat("i", i) + ", node: n1, sql: *s}\n")
	}
	block := []byte(b.String())
	// The same as a flow mapping, which looks like JSON until the parser meets the anchor.
	b.Reset()
	b.WriteString(`{"description": "bomb", "tasks": [{"name": "t0", "node": "n1", "sql": &s "select '` + strings.Repeat("x", 1<<20) + `'"}`)
	for i := 1; i < 100; i++ {
		b.WriteString(", {name: t" + strings.Repeat("i", i) + ", node: n1, sql: *s}")
	}
	b.WriteString("]}\n")
	flow := []byte(b.String())
	for _, doc := range [][]byte{block, flow} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Parse(doc)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "aliases") {
			t.Errorf("Parse of %d bytes expanding to 100 MiB: err = %v, want a refusal", len(doc), err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("Parse of %d bytes allocated %d MiB", len(doc), grew>>20)
		}
	}

	// Aliases that repeat a little text, as specs use them, are read as before.
	small := "description: anchors\ntasks:\n- {name: a, node: n1, sql: &s 'select 1'}\n- {name: b, node: n1, sql: *s}\n"
	job, err := Parse([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Tasks) != 2 || job.Tasks[1].SQL != "select 1" {
		t.Errorf("tasks = %+v", job.Tasks)
	}
}
