package deckhandtype

import "testing"

func TestLSN(t *testing.T) {
	l, err := ParseLSN("16/B374D848")
	if err != nil || l != 0x16B374D848 || l.String() != "16/B374D848" {
		t.Fatalf("%v %x %s", err, uint64(l), l)
	}
	if _, err := ParseLSN("nope"); err == nil {
		t.Fatal("parsed nonsense")
	}
}
