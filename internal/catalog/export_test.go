package catalog

// The claim's statements, for the tests that read their plans.
var (
	LockNodesSQL     = lockNodesSQL
	LockEveryNodeSQL = lockEveryNodeSQL
	ClaimSQL         = claimSQL
)

// CompleteSQL and CompleteArgs are the completion statement and its arguments.
var CompleteSQL = completeSQL

func CompleteArgs(results []Result) (map[string]any, error) {
	args, err := completeArgs(results)
	if err != nil {
		return nil, err
	}
	args["now"], args["released_by"], args["completer"], args["notify_anywhere"] = nil, "0", int64(0), true
	return args, nil
}

// ProbesOnly is what claims and completions run first in their transactions.
const ProbesOnly = probesOnly

// OrderedProbes is what claims run after ProbesOnly (and a completion) in their transactions.
const OrderedProbes = orderedProbes

// IsActive is the negated test of a running or cancelling task's state.
const IsActive = isActive

// TasksPageSQL is the statement of a page of a job's tasks.
const TasksPageSQL = tasksPageSQL
