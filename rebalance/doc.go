// Package rebalance spreads tenant schemas evenly over node groups: it sizes the candidate
// schemas on each group's primary (Size, in a session as the rebalance's owner, so that nobody
// learns more than the owner could read), plans moves (PlanMoves: greedy, largest first,
// never overshooting), orders them into a graph that sends before it receives and keeps each
// primary to its max_tasks concurrent moves (Schedule), and builds from it one job of move
// tasks (Job; package move), which `deckhand rebalance` submits.
package rebalance
