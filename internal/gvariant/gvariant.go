// Package gvariant encodes and decodes GVariant serialized data (the
// normal form of the GLib GVariant format, little-endian framing) for the
// types libostree stores on disk: basic types y b u t s, arrays, tuples,
// dict entries and variants.
//
// Go values map to types as follows: y uint8, b bool, u uint32, t uint64,
// s string, ay []byte, other arrays []any, tuples and dict entries []any
// (one element per member), v Variant. Integers are written little-endian,
// as GVariant does; ostree stores most of its integers byte-swapped to big
// endian, which callers do with SwapU32/SwapU64 before encoding.
package gvariant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Variant is a value of type v: a value together with its type string.
type Variant struct {
	Type  string
	Value any
}

// SwapU32 byte-swaps v (GUINT32_TO_BE on a little-endian host).
func SwapU32(v uint32) uint32 { return bits.ReverseBytes32(v) }

// SwapU64 byte-swaps v (GUINT64_TO_BE on a little-endian host).
func SwapU64(v uint64) uint64 { return bits.ReverseBytes64(v) }

// splitType returns the first complete type of sig and the rest.
func splitType(sig string) (string, string, error) {
	if sig == "" {
		return "", "", errors.New("empty type")
	}
	switch sig[0] {
	case 'y', 'b', 'n', 'q', 'i', 'u', 'x', 't', 'd', 's', 'o', 'g', 'v', 'h':
		return sig[:1], sig[1:], nil
	case 'a', 'm':
		elem, rest, err := splitType(sig[1:])
		if err != nil {
			return "", "", err
		}
		return sig[:1+len(elem)], rest, nil
	case '(', '{':
		closer := byte(')')
		if sig[0] == '{' {
			closer = '}'
		}
		i := 1
		for {
			if i >= len(sig) {
				return "", "", fmt.Errorf("unterminated type %q", sig)
			}
			if sig[i] == closer {
				return sig[:i+1], sig[i+1:], nil
			}
			_, rest, err := splitType(sig[i:])
			if err != nil {
				return "", "", err
			}
			i = len(sig) - len(rest)
		}
	}
	return "", "", fmt.Errorf("unsupported type character %q in %q", sig[0], sig)
}

// members returns the member types of a tuple or dict entry type.
func members(typ string) ([]string, error) {
	inner := typ[1 : len(typ)-1]
	var out []string
	for inner != "" {
		t, rest, err := splitType(inner)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		inner = rest
	}
	return out, nil
}

// alignment is the alignment of typ in bytes.
func alignment(typ string) int {
	switch typ[0] {
	case 'y', 'b', 's', 'o', 'g':
		return 1
	case 'n', 'q':
		return 2
	case 'i', 'u', 'h':
		return 4
	case 'x', 't', 'd', 'v':
		return 8
	case 'a', 'm':
		return alignment(typ[1:])
	case '(', '{':
		ms, _ := members(typ)
		a := 1
		for _, m := range ms {
			a = max(a, alignment(m))
		}
		return a
	}
	return 1
}

// fixedSize is the size of typ if it has a fixed size, else 0.
func fixedSize(typ string) int {
	switch typ[0] {
	case 'y', 'b':
		return 1
	case 'n', 'q':
		return 2
	case 'i', 'u', 'h':
		return 4
	case 'x', 't', 'd':
		return 8
	case '(', '{':
		ms, _ := members(typ)
		if len(ms) == 0 {
			return 1
		}
		off := 0
		for _, m := range ms {
			s := fixedSize(m)
			if s == 0 {
				return 0
			}
			off = alignUp(off, alignment(m)) + s
		}
		return alignUp(off, alignment(typ))
	}
	return 0
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

func pad(b []byte, a int) []byte {
	for len(b)%a != 0 {
		b = append(b, 0)
	}
	return b
}

// offsetSize is the framing offset width for a container whose body is
// bodyLen bytes followed by n offsets.
func offsetSize(bodyLen, n int) int {
	switch {
	case bodyLen+n == 0:
		return 0
	case bodyLen+n <= 0xff:
		return 1
	case bodyLen+2*n <= 0xffff:
		return 2
	case uint64(bodyLen)+4*uint64(n) <= 0xffffffff:
		return 4
	}
	return 8
}

// offsetSizeOf is the framing offset width of a serialized container of
// the given total size.
func offsetSizeOf(size int) int {
	switch {
	case size == 0:
		return 0
	case size <= 0xff:
		return 1
	case size <= 0xffff:
		return 2
	case uint64(size) <= 0xffffffff:
		return 4
	}
	return 8
}

func appendOffset(b []byte, v, w int) []byte {
	for i := 0; i < w; i++ {
		b = append(b, byte(uint64(v)>>(8*i)))
	}
	return b
}

func readOffset(b []byte) int {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return int(v)
}

// Encode serializes v as type typ.
func Encode(typ string, v any) ([]byte, error) {
	t, rest, err := splitType(typ)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, fmt.Errorf("type %q is not a single complete type", typ)
	}
	return encode(nil, t, v)
}

func typeErr(typ string, v any) error {
	return fmt.Errorf("cannot encode %T as %s", v, typ)
}

// encode appends the serialization of v (as typ) to b, which starts at
// an offset aligned for typ's container.
func encode(b []byte, typ string, v any) ([]byte, error) {
	switch typ[0] {
	case 'y':
		x, ok := v.(uint8)
		if !ok {
			return nil, typeErr(typ, v)
		}
		return append(b, x), nil
	case 'b':
		x, ok := v.(bool)
		if !ok {
			return nil, typeErr(typ, v)
		}
		if x {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case 'u':
		x, ok := v.(uint32)
		if !ok {
			return nil, typeErr(typ, v)
		}
		return binary.LittleEndian.AppendUint32(b, x), nil
	case 't':
		x, ok := v.(uint64)
		if !ok {
			return nil, typeErr(typ, v)
		}
		return binary.LittleEndian.AppendUint64(b, x), nil
	case 's', 'o', 'g':
		x, ok := v.(string)
		if !ok {
			return nil, typeErr(typ, v)
		}
		b = append(b, x...)
		return append(b, 0), nil
	case 'v':
		x, ok := v.(Variant)
		if !ok {
			return nil, typeErr(typ, v)
		}
		if _, rest, err := splitType(x.Type); err != nil || rest != "" {
			return nil, fmt.Errorf("variant has invalid type %q", x.Type)
		}
		body, err := encode(nil, x.Type, x.Value)
		if err != nil {
			return nil, err
		}
		b = append(b, body...)
		b = append(b, 0)
		return append(b, x.Type...), nil
	case 'a':
		if b == nil {
			b = []byte{}
		}
		return encodeArray(b, typ, v)
	case '(', '{':
		return encodeTuple(b, typ, v)
	}
	return nil, fmt.Errorf("unsupported type %q", typ)
}

func encodeArray(b []byte, typ string, v any) ([]byte, error) {
	elem := typ[1:]
	if elem == "y" {
		x, ok := v.([]byte)
		if !ok {
			return nil, typeErr(typ, v)
		}
		return append(b, x...), nil
	}
	items, ok := v.([]any)
	if !ok {
		return nil, typeErr(typ, v)
	}
	if len(items) == 0 {
		return b, nil
	}
	al := alignment(elem)
	var body []byte
	var ends []int
	var err error
	fixed := fixedSize(elem) != 0
	for _, it := range items {
		body = pad(body, al)
		if body, err = encode(body, elem, it); err != nil {
			return nil, err
		}
		ends = append(ends, len(body))
	}
	if !fixed {
		w := offsetSize(len(body), len(ends))
		for _, e := range ends {
			body = appendOffset(body, e, w)
		}
	}
	return append(b, body...), nil
}

func encodeTuple(b []byte, typ string, v any) ([]byte, error) {
	ms, err := members(typ)
	if err != nil {
		return nil, err
	}
	items, ok := v.([]any)
	if !ok || len(items) != len(ms) {
		return nil, fmt.Errorf("cannot encode %T (%d members) as %s", v, len(items), typ)
	}
	var body []byte
	var ends []int
	for i, m := range ms {
		body = pad(body, alignment(m))
		if body, err = encode(body, m, items[i]); err != nil {
			return nil, err
		}
		if fixedSize(m) == 0 && i != len(ms)-1 {
			ends = append(ends, len(body))
		}
	}
	if fs := fixedSize(typ); fs != 0 {
		body = pad(body, alignment(typ))
		if len(ms) == 0 {
			body = append(body, 0)
		}
		return append(b, body...), nil
	}
	w := offsetSize(len(body), len(ends))
	for i := len(ends) - 1; i >= 0; i-- {
		body = appendOffset(body, ends[i], w)
	}
	return append(b, body...), nil
}

// Decode parses data as type typ.
func Decode(typ string, data []byte) (any, error) {
	t, rest, err := splitType(typ)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, fmt.Errorf("type %q is not a single complete type", typ)
	}
	return decode(t, data, 0)
}

// maxDepth bounds nesting (variants can nest without limit in the type
// system; ostree's types need 4 levels).
const maxDepth = 64

var errShort = errors.New("data too short")

func decode(typ string, d []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("decoding: nesting too deep")
	}
	if fs := fixedSize(typ); fs != 0 && len(d) != fs {
		return nil, fmt.Errorf("decoding %s: %d bytes, want %d", typ, len(d), fs)
	}
	switch typ[0] {
	case 'y':
		return d[0], nil
	case 'b':
		return d[0] != 0, nil
	case 'u':
		return binary.LittleEndian.Uint32(d), nil
	case 't':
		return binary.LittleEndian.Uint64(d), nil
	case 's', 'o', 'g':
		if len(d) == 0 || d[len(d)-1] != 0 {
			return nil, fmt.Errorf("decoding %s: string not NUL-terminated", typ)
		}
		return string(d[:len(d)-1]), nil
	case 'v':
		i := len(d) - 1
		for i >= 0 && d[i] != 0 {
			i--
		}
		if i < 0 {
			return nil, errors.New("decoding v: no type string")
		}
		vt := string(d[i+1:])
		if _, rest, err := splitType(vt); err != nil || rest != "" {
			return nil, fmt.Errorf("decoding v: invalid type %q", vt)
		}
		val, err := decode(vt, d[:i], depth+1)
		if err != nil {
			return nil, err
		}
		return Variant{Type: vt, Value: val}, nil
	case 'a':
		return decodeArray(typ, d, depth)
	case '(', '{':
		return decodeTuple(typ, d, depth)
	}
	return nil, fmt.Errorf("unsupported type %q", typ)
}

func decodeArray(typ string, d []byte, depth int) (any, error) {
	elem := typ[1:]
	if elem == "y" {
		return append([]byte{}, d...), nil
	}
	items := []any{}
	if len(d) == 0 {
		return items, nil
	}
	if fs := fixedSize(elem); fs != 0 {
		if len(d)%fs != 0 {
			return nil, fmt.Errorf("decoding %s: %d bytes is not a multiple of %d", typ, len(d), fs)
		}
		for i := 0; i < len(d); i += fs {
			v, err := decode(elem, d[i:i+fs], depth+1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return items, nil
	}
	w := offsetSizeOf(len(d))
	last := readOffset(d[len(d)-w:])
	if last > len(d) || (len(d)-last)%w != 0 {
		return nil, fmt.Errorf("decoding %s: bad framing offset", typ)
	}
	n := (len(d) - last) / w
	start := 0
	al := alignment(elem)
	for i := 0; i < n; i++ {
		end := readOffset(d[last+i*w : last+(i+1)*w])
		start = alignUp(start, al)
		if start > end || end > last {
			return nil, fmt.Errorf("decoding %s: bad framing offset", typ)
		}
		v, err := decode(elem, d[start:end], depth+1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		start = end
	}
	return items, nil
}

func decodeTuple(typ string, d []byte, depth int) (any, error) {
	ms, err := members(typ)
	if err != nil {
		return nil, err
	}
	w := offsetSizeOf(len(d))
	if fixedSize(typ) != 0 {
		w = 0
	}
	items := make([]any, 0, len(ms))
	pos := 0
	frames := 0 // framing offsets consumed, counted from the end
	for i, m := range ms {
		pos = alignUp(pos, alignment(m))
		var end int
		if fs := fixedSize(m); fs != 0 {
			end = pos + fs
		} else if i == len(ms)-1 {
			end = len(d) - frames*w
		} else {
			frames++
			if frames*w > len(d) {
				return nil, fmt.Errorf("decoding %s: %w", typ, errShort)
			}
			end = readOffset(d[len(d)-frames*w : len(d)-(frames-1)*w])
		}
		if pos > end || end > len(d) {
			return nil, fmt.Errorf("decoding %s: member %d out of bounds", typ, i)
		}
		v, err := decode(m, d[pos:end], depth+1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		pos = end
	}
	return items, nil
}
