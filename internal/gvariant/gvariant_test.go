package gvariant

import (
	"bytes"
	"reflect"
	"testing"
)

// Examples from the GVariant serialization specification (section 4.2).
func TestSpecExamples(t *testing.T) {
	cases := []struct {
		typ  string
		v    any
		want []byte
	}{
		{"s", "hello world", []byte("hello world\x00")},
		{"as", []any{"i", "can", "has", "strings?"}, append([]byte("i\x00can\x00has\x00strings?\x00"), 0x02, 0x06, 0x0a, 0x13)},
		{"(sy)", []any{"foo", uint8(0x12)}, []byte("foo\x00\x12\x04")},
		{"(ys)", []any{uint8(0x12), "foo"}, []byte("\x12foo\x00")},
		{"a(sy)", []any{[]any{"foo", uint8(0x12)}, []any{"bar", uint8(0x34)}},
			[]byte("foo\x00\x12\x04bar\x00\x34\x04\x06\x0c")},
		{"{sv}", []any{"k", Variant{Type: "s", Value: "v"}}, []byte("k\x00\x00\x00\x00\x00\x00\x00v\x00\x00s\x02")},
		{"au", []any{uint32(1), uint32(2)}, []byte{1, 0, 0, 0, 2, 0, 0, 0}},
		{"(uu)", []any{uint32(1), uint32(2)}, []byte{1, 0, 0, 0, 2, 0, 0, 0}},
		{"ay", []byte{}, []byte{}},
		{"a{sv}", []any{}, []byte{}},
	}
	for _, c := range cases {
		got, err := Encode(c.typ, c.v)
		if err != nil {
			t.Fatalf("Encode(%s): %v", c.typ, err)
		}
		if !bytes.Equal(got, c.want) {
			t.Errorf("Encode(%s) = %q, want %q", c.typ, got, c.want)
		}
		back, err := Decode(c.typ, got)
		if err != nil {
			t.Fatalf("Decode(%s): %v", c.typ, err)
		}
		if !reflect.DeepEqual(back, c.v) {
			t.Errorf("Decode(%s) = %#v, want %#v", c.typ, back, c.v)
		}
	}
}

func TestRoundTripNested(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 300) // forces 2-byte framing offsets
	v := []any{
		[]any{
			[]any{"ostree.bootable", Variant{Type: "b", Value: true}},
			[]any{"version", Variant{Type: "s", Value: "42"}},
			[]any{"filtered", Variant{Type: "a{sa{su}}", Value: []any{
				[]any{"sha256:x", []any{[]any{"opt", uint32(3)}}},
			}}},
		},
		[]byte{},
		[]any{},
		"subject",
		string(big),
		SwapU64(1735689600),
		bytes.Repeat([]byte{1}, 32),
		bytes.Repeat([]byte{2}, 32),
	}
	typ := "(a{sv}aya(say)sstayay)"
	enc, err := Encode(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(typ, enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, v) {
		t.Fatalf("round trip mismatch:\n%#v\n%#v", dec, v)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, d := range [][]byte{{0xff}, {1, 2, 3, 0xfe}, {}} {
		if _, err := Decode("(a{sv}aya(say)sstayay)", d); err == nil {
			t.Errorf("Decode(%x) succeeded", d)
		}
	}
	if _, err := Encode("u", "x"); err == nil {
		t.Error("Encode(u, string) succeeded")
	}
}

// Random and truncated input never panics.
func TestDecodeNoPanic(t *testing.T) {
	valid, err := Encode("(a{sv}aya(say)sstayay)", []any{
		[]any{[]any{"k", Variant{Type: "v", Value: Variant{Type: "as", Value: []any{"a", "b"}}}}},
		[]byte{}, []any{}, "s", "b", uint64(1), bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	seed := uint32(1)
	next := func() byte { seed = seed*1664525 + 1013904223; return byte(seed >> 24) }
	for i := 0; i < 4000; i++ {
		b := append([]byte{}, valid...)
		for j := 0; j < 1+i%4; j++ {
			b[int(next())%len(b)] = next()
		}
		b = b[:int(next())%(len(b)+1)]
		for _, typ := range []string{"(a{sv}aya(say)sstayay)", "(a(say)a(sayay))", "(uuua(ayay))", "v"} {
			_, _ = Decode(typ, b)
		}
	}
	deep := []byte{}
	for i := 0; i < 1000; i++ {
		deep = append(deep, 0, 'v')
	}
	if _, err := Decode("v", deep); err == nil {
		t.Error("deeply nested variant decoded")
	}
}
