package spec

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest task name, in bytes (PostgreSQL's identifier limit).
const MaxNameLen = 63

// MaxMaxAttempts bounds Task.MaxAttempts.
const MaxMaxAttempts = 1000

// MaxTaskText bounds a task's SQL and its payload, in bytes, as the catalog does: each goes
// whole into the memory of the worker that runs the task.
const MaxTaskText = 16 << 20

// PayloadValidator checks a task's payload at submission, without a database; its error is
// the reason, shown after the task's name. An empty payload reaches it as nil.
type PayloadValidator func(payload json.RawMessage) error

// KindSpec is what Validate knows of a task kind.
type KindSpec struct {
	NeedsNode bool             // a task of the kind must name a node
	Validate  PayloadValidator // checks the payload at submission; nil: the kind takes no payload
}

// Kinds are the task kinds a job may use besides sql and noop, which are always known. The
// program that submits assembles them from the features it ships (see engine.Feature).
type Kinds map[string]KindSpec

// builtin are the kinds every job may use.
var builtin = Kinds{KindSQL: {NeedsNode: true}, KindNoop: {}}

func (k Kinds) lookup(name string) (KindSpec, bool) {
	if s, ok := builtin[name]; ok {
		return s, true
	}
	s, ok := k[name]
	return s, ok
}

// names are the known kinds, sorted, for messages.
func (k Kinds) names() []string {
	all := slices.Collect(maps.Keys(builtin))
	for name := range k {
		if _, ok := builtin[name]; !ok {
			all = append(all, name)
		}
	}
	slices.Sort(all)
	return all
}

// MaxTimeout is the longest statement_timeout or lock_timeout PostgreSQL takes: 2147483647 ms,
// about 24.8 days.
const MaxTimeout = 2147483647 * time.Millisecond

// CheckTimeout refuses a timeout PostgreSQL cannot enforce as given: not positive, shorter than
// its unit (a millisecond), or longer than MaxTimeout. field names it in the reason.
func CheckTimeout(field string, d Duration) error {
	switch v := time.Duration(d); {
	case v <= 0:
		return fmt.Errorf("%s must be positive, got %s", field, v)
	case v < time.Millisecond:
		return fmt.Errorf("%s must be at least 1ms, got %s", field, v)
	case v > MaxTimeout:
		return fmt.Errorf("%s must be at most %s (PostgreSQL's longest, 2147483647ms), got %s", field, MaxTimeout, v)
	}
	return nil
}

// Attempts is the task's maximum number of attempts, DefaultMaxAttempts when unset.
func (t Task) Attempts() int {
	if t.MaxAttempts == 0 {
		return DefaultMaxAttempts
	}
	return t.MaxAttempts
}

// TimeoutOrDefault is the task's timeout, DefaultTimeout when unset.
func (t Task) TimeoutOrDefault() time.Duration {
	if t.Timeout == 0 {
		return DefaultTimeout
	}
	return time.Duration(t.Timeout)
}

// MaxJobText bounds a job's description and search_path, in characters, as the catalog does.
const MaxJobText = 10000

// MaxJobSettings bounds the names and values of a job's settings together, in bytes, as the
// catalog does: they go with each of the job's tasks that a worker claims.
const MaxJobSettings = 1 << 20

// jobKindRE is what a job's kind, a label its submitter chooses, may be (as in the catalog).
var jobKindRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// gucNameRE matches setting names such as work_mem or myext.some_setting.
var gucNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// reservedSettings are the settings deckhand sets in a task's session itself, or that would
// change who the session is.
var reservedSettings = []string{"search_path", "statement_timeout", "application_name", "role", "session_authorization"}

// ReservedSetting reports whether a job may not choose setting name, in any case.
func ReservedSetting(name string) bool {
	return slices.Contains(reservedSettings, strings.ToLower(name))
}

// Validate checks the job without a database and returns the first problem as a one-line
// *Error naming the task concerned. Checks that need the catalog (that nodes and roles exist,
// that the submitter may act as the owner) belong to the engine.
//
// Validate normalizes the job: when it succeeds, every task's Kind is set (an empty Kind with
// SQL becomes "sql"). On error the job is left unchanged.
func (j *Job) Validate(kinds Kinds) error {
	if j == nil {
		return Invalidf("no job")
	}
	if len(j.Tasks) == 0 {
		return Invalidf("job has no tasks")
	}
	if strings.ContainsRune(j.SearchPath, 0) {
		return Invalidf("search_path contains a NUL byte")
	}
	// The catalog's own checks (deckhand.submit_job), which do not run for a job a worker
	// writes: a schedule's firing.
	if utf8.RuneCountInString(j.Description) > MaxJobText || utf8.RuneCountInString(j.SearchPath) > MaxJobText {
		return Invalidf("description and search_path are limited to %d characters", MaxJobText)
	}
	if j.Kind != "" && !jobKindRE.MatchString(j.Kind) {
		return Invalidf("job kind %q: use a lower-case word such as sql or drop", j.Kind)
	}
	if err := CheckKey(j.Key); err != nil {
		return err
	}
	if j.Priority < MinPriority || j.Priority > MaxPriority {
		return Invalidf("priority must be a whole number between %d and %d, got %d", MinPriority, MaxPriority, j.Priority)
	}
	settingsSize := 0
	for _, name := range slices.Sorted(maps.Keys(j.Settings)) {
		if settingsSize += len(name) + len(j.Settings[name]); settingsSize > MaxJobSettings {
			return Invalidf("settings: their names and values are limited to %d MiB together", MaxJobSettings>>20)
		}
		if !gucNameRE.MatchString(name) {
			return Invalidf("settings: %q is not a valid setting name", name)
		}
		if ReservedSetting(name) {
			return Invalidf("settings: %q is set by deckhand for every task (a job names its search_path, timeout and owner in their own fields)", name)
		}
		if strings.ContainsRune(j.Settings[name], 0) {
			return Invalidf("settings: value of %q contains a NUL byte", name)
		}
	}

	index := make(map[string]int, len(j.Tasks))
	for i, t := range j.Tasks {
		if err := checkName(i, t.Name); err != nil {
			return err
		}
		if first, dup := index[t.Name]; dup {
			return Invalidf("duplicate task name %q (tasks #%d and #%d)", t.Name, first+1, i+1)
		}
		index[t.Name] = i
	}

	resolved := make([]string, len(j.Tasks))
	for i, t := range j.Tasks {
		kind, err := t.validate(index, kinds)
		if err != nil {
			return err
		}
		resolved[i] = kind
	}
	if cycle := j.findCycle(index); cycle != nil {
		return Invalidf("dependency cycle: %s", strings.Join(cycle, " -> "))
	}
	for i := range j.Tasks {
		j.Tasks[i].Kind = resolved[i]
	}
	return nil
}

func checkName(i int, name string) error {
	switch {
	case name == "":
		return Invalidf("task #%d: name is empty", i+1)
	case strings.TrimSpace(name) != name:
		return Invalidf("task %q: name has leading or trailing space", name)
	case len(name) > MaxNameLen:
		return Invalidf("task %q: name is longer than %d bytes", name, MaxNameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		return Invalidf("task %q: name contains a control character", name)
	}
	return nil
}

// validate checks one task whose name is known to be valid and returns its resolved kind.
func (t Task) validate(index map[string]int, kinds Kinds) (string, error) {
	kind := t.Kind
	if kind == "" {
		if t.SQL == "" {
			return "", Invalidf("task %q: sql is empty", t.Name)
		}
		kind = KindSQL
	}
	k, ok := kinds.lookup(kind)
	if !ok {
		return "", Invalidf("task %q: unknown kind %q (known kinds: %s)", t.Name, kind, strings.Join(kinds.names(), ", "))
	}
	if len(t.SQL) > MaxTaskText || len(t.Payload) > MaxTaskText {
		return "", Invalidf("task %q: sql and payload are limited to %d MiB each", t.Name, MaxTaskText>>20)
	}
	if kind == KindSQL {
		if strings.TrimSpace(t.SQL) == "" {
			return "", Invalidf("task %q: sql is empty", t.Name)
		}
	} else if t.SQL != "" {
		return "", Invalidf("task %q: kind %q does not take sql", t.Name, kind)
	}
	payload := t.Payload
	if p := bytes.TrimSpace(payload); len(p) == 0 || bytes.Equal(p, []byte("null")) {
		payload = nil
	}
	if k.Validate == nil && payload != nil {
		return "", Invalidf("task %q: kind %q does not take a payload", t.Name, kind)
	}
	if k.NeedsNode && t.Node == "" {
		return "", Invalidf("task %q: node is required for kind %q", t.Name, kind)
	}
	if k.Validate != nil {
		if err := k.Validate(payload); err != nil {
			return "", Invalidf("task %q: %s", t.Name, OneLine(err.Error()))
		}
	}
	if t.MaxAttempts < 0 || t.MaxAttempts > MaxMaxAttempts {
		return "", Invalidf("task %q: max_attempts must be between 1 and %d (0 means the default, %d), got %d",
			t.Name, MaxMaxAttempts, DefaultMaxAttempts, t.MaxAttempts)
	}
	// Zero is the default; anything else must be a statement_timeout PostgreSQL takes.
	if t.Timeout != 0 {
		if err := CheckTimeout("timeout", t.Timeout); err != nil {
			return "", Invalidf("task %q: %v", t.Name, err)
		}
	}
	seen := make(map[string]bool, len(t.DependsOn))
	for _, dep := range t.DependsOn {
		switch {
		case dep == t.Name:
			return "", Invalidf("task %q: depends on itself", t.Name)
		case seen[dep]:
			return "", Invalidf("task %q: depends_on lists %q twice", t.Name, dep)
		}
		if _, ok := index[dep]; !ok {
			return "", Invalidf("task %q: depends on unknown task %q", t.Name, dep)
		}
		seen[dep] = true
	}
	return kind, nil
}

// findCycle returns a dependency cycle as task names, first name repeated at the end
// ("a", "b", "a" reads: a depends on b, b depends on a), or nil. The search is a depth-first
// walk from each task in spec order, following depends_on in listed order, so the cycle
// reported is deterministic. Unknown dependencies are ignored.
func (j *Job) findCycle(index map[string]int) []string {
	const (
		unvisited = iota
		onStack
		finished
	)
	state := make([]int, len(j.Tasks))
	var stack []int
	var visit func(i int) []string
	visit = func(i int) []string {
		state[i] = onStack
		stack = append(stack, i)
		for _, dep := range j.Tasks[i].DependsOn {
			d, ok := index[dep]
			if !ok {
				continue
			}
			switch state[d] {
			case onStack:
				start := slices.Index(stack, d)
				var cycle []string
				for _, k := range stack[start:] {
					cycle = append(cycle, j.Tasks[k].Name)
				}
				return append(cycle, j.Tasks[d].Name)
			case unvisited:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = finished
		return nil
	}
	for i := range j.Tasks {
		if state[i] == unvisited {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// TopoOrder returns the indexes of j.Tasks in an order where every task comes after the tasks
// it depends on; among tasks that are ready together, spec order wins. It is meant for a job
// that passed Validate: unknown dependency names are ignored and tasks on a cycle (or
// depending on one) are left out.
func (j *Job) TopoOrder() []int {
	index := make(map[string]int, len(j.Tasks))
	for i, t := range j.Tasks {
		if _, dup := index[t.Name]; !dup {
			index[t.Name] = i
		}
	}
	pending := make([]int, len(j.Tasks))      // unmet dependencies per task
	dependents := make([][]int, len(j.Tasks)) // reverse edges
	for i, t := range j.Tasks {
		seen := make(map[int]bool, len(t.DependsOn))
		for _, dep := range t.DependsOn {
			d, ok := index[dep]
			if !ok || seen[d] {
				continue
			}
			seen[d] = true
			pending[i]++
			dependents[d] = append(dependents[d], i)
		}
	}
	ready := &intHeap{}
	for i, n := range pending {
		if n == 0 {
			*ready = append(*ready, i) // ascending, hence already a heap
		}
	}
	order := make([]int, 0, len(j.Tasks))
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, i)
		for _, d := range dependents[i] {
			if pending[d]--; pending[d] == 0 {
				heap.Push(ready, d)
			}
		}
	}
	return order
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(a, b int) bool { return h[a] < h[b] }
func (h intHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// MaxKeyLen is the longest job key, in characters.
const MaxKeyLen = 200

// CheckKey refuses a job key the catalog would refuse (deckhand.key_problem): empty is no key.
func CheckKey(key string) error {
	if key == "" {
		return nil
	}
	if !utf8.ValidString(key) || utf8.RuneCountInString(key) > MaxKeyLen || strings.TrimSpace(key) != key ||
		strings.ContainsFunc(key, unicode.IsControl) {
		return Invalidf("key must be 1 to %d characters, without control characters or surrounding spaces", MaxKeyLen)
	}
	return nil
}
