package deckhandtype

import "testing"

func TestLSN(t *testing.T) {
	l, err := ParseLSN("16/B374D848")
	if err != nil || l != 0x16B374D848 || l.String() != "16/B374D848" {
		t.Fatalf("%v %x %s", err, uint64(l), l)
	}
	if l, err := ParseLSN("ffffffff/0a"); err != nil || l.String() != "FFFFFFFF/A" {
		t.Fatalf("lower case: %v %s", err, l)
	}
	// What pg_lsn's input refuses: more than eight digits a side (leading zeros too), signs,
	// spaces, an empty side, anything after.
	for _, s := range []string{"nope", "", "/", "0/", "/0", "000000000/0", "0/000000000", "+1/0", " 1/0", "1/0 ", "1/0/0", "1/0x1"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("ParseLSN(%q) took what pg_lsn refuses", s)
		}
	}
}
