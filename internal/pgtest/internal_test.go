package pgtest

import (
	"strings"
	"testing"
)

func TestDatabaseName(t *testing.T) {
	if got := databaseName("TestFoo/sub case#1", 7); got != "t_testfoo_sub_case_1_7" {
		t.Fatalf("got %q", got)
	}
	long := databaseName(strings.Repeat("x", 200), 123456)
	if len(long) > 63 || !strings.HasSuffix(long, "_123456") {
		t.Fatalf("got %q (%d bytes)", long, len(long))
	}
}
