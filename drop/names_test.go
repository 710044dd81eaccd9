package drop_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/drop"
	"github.com/deckhandhq/deckhand/engine"
	"github.com/deckhandhq/deckhand/internal/testenv/clitest"
)

// `deckhand drop NAME` drops the table PostgreSQL reads NAME as, the one `DROP TABLE NAME`
// would: unquoted, only ASCII letters fold to lower case (in a UTF-8 database É stays É, and
// the Kelvin sign is no k), and a name longer than 63 bytes is cut there. Another table that
// deckhand's reading would name instead stays.
func TestDropReadsNamesAsPostgreSQLDoes(t *testing.T) {
	t.Parallel()
	e, db := newEnv(t)
	long := strings.Repeat("l", 70)
	e.NodeExec(db, `CREATE TABLE "Événements" (id int); CREATE TABLE "événements" (id int);
		CREATE TABLE "`+"\u212a"+`eep" (id int); CREATE TABLE keep (id int); CREATE TABLE `+long+` (id int)`)
	e.WorkerWith([]engine.Feature{drop.Feature()})
	for _, name := range []string{"Événements", "\u212aEEP", long} {
		if !e.TableExists(db, name) {
			t.Fatalf("PostgreSQL reads %s as no table", name)
		}
		code, out, errOut := clitest.Deckhand(t, e.DSN, "drop", "--node", "n1", "--wait", name)
		if code != 0 {
			t.Errorf("drop %s: exit %d\nstdout %s\nstderr %s", name, code, out, errOut)
		}
		if e.TableExists(db, name) {
			t.Errorf("drop %s: the table PostgreSQL reads the name as is still there", name)
		}
	}
	for _, other := range []string{`"événements"`, "keep"} {
		if !e.TableExists(db, other) {
			t.Errorf("%s was dropped: no name given reads as it", other)
		}
	}
}
