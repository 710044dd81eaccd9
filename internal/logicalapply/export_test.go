package logicalapply

import "github.com/jackc/pglogrepl"

// SetAppliedForTest moves the applied position, for tests of WaitApplied alone.
func (a *Applier) SetAppliedForTest(lsn pglogrepl.LSN) { a.advance(lsn) }

// StreamFromSlotForTest makes the next runs ask the source for everything after the slot's
// confirmed position, so that it sends again what the target has applied.
func (a *Applier) StreamFromSlotForTest(on bool) { a.streamFromSlot = on }
