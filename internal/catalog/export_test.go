package catalog

// The claim's statements, for the tests that read their plans.
var (
	LockNodesSQL   = lockNodesSQL
	ClaimSQL       = claimSQL
	ClaimGroupsSQL = claimGroupsSQL
)
