package logicalapply

import "github.com/jackc/pglogrepl"

// SetAppliedForTest moves the applied position, for tests of WaitApplied alone.
func (a *Applier) SetAppliedForTest(lsn pglogrepl.LSN) { a.advance(lsn) }
