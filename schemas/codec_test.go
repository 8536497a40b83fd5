package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// codecCase is one struct with a codec, for the tests that hold every
// codec to its struct.
type codecCase struct {
	name  string
	typ   reflect.Type
	check func(t *testing.T)
	// roundTrip writes v (a pointer to the struct) with the codec and
	// reads it back with it.
	roundTrip func(t *testing.T, v any) (written []byte, read any, took bool)
	// writeOnly: the codec only writes (the reflection path reads its
	// messages); roundTrip's read is nil.
	writeOnly bool
}

func caseOf[T any](name string, c *codec[T]) codecCase {
	return codecCase{
		name:  name,
		typ:   reflect.TypeFor[T](),
		check: func(t *testing.T) { checkMembers(t, c) },
		roundTrip: func(t *testing.T, v any) ([]byte, any, bool) {
			b, err := c.appendTo([]byte("prefix"), v.(*T))
			if err != nil {
				t.Fatalf("%s: write: %v", name, err)
			}
			if !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatalf("%s: the write lost what dst held: %q", name, b)
			}
			b = b[len("prefix"):]
			back := new(T)
			return b, back, c.decode(b, back)
		},
	}
}

// writerOf is caseOf for a codec that only writes.
func writerOf[T any](name string, c *codec[T]) codecCase {
	cc := caseOf(name, c)
	cc.writeOnly = true
	cc.roundTrip = func(t *testing.T, v any) ([]byte, any, bool) {
		b, err := c.appendTo([]byte("prefix"), v.(*T))
		if err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
		return b[len("prefix"):], nil, false
	}
	return cc
}

// codecCases lists every codec: a codec added for another wire type goes
// here too.
func codecCases() []codecCase {
	return []codecCase{
		caseOf("SampleRequest", sampleRequestCodec),
		caseOf("SampleMember", sampleMemberCodec),
		caseOf("SampleResult", sampleResultCodec),
		caseOf("ResultMember", resultMemberCodec),
		writerOf("JournalEntry", journalEntryCodec),
		writerOf("TallyEntry", tallyEntryCodec),
	}
}

// wireField is a struct field as encoding/json sees it.
type wireField struct {
	path  string
	tag   string
	typ   reflect.Type
	index []int
}

// wireFields lists t's fields as encoding/json reads and writes them, in
// order, embedded structs flattened; anything the codecs do not expect
// (a field without a json tag, an unexported or ignored field) fails.
func wireFields(t *testing.T, typ reflect.Type, index []int, prefix string) []wireField {
	var out []wireField
	for i := range typ.NumField() {
		f := typ.Field(i)
		idx := append(append([]int(nil), index...), i)
		tag, hasTag := f.Tag.Lookup("json")
		switch {
		case f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct:
			out = append(out, wireFields(t, f.Type, idx, prefix+f.Name+".")...)
		case !f.IsExported() || tag == "-" || !hasTag || tag == "":
			t.Errorf("%s%s: every field of a type with a codec is on the wire under a json tag (tag %q): the codec and the tests expect no other kind", prefix, f.Name, tag)
		default:
			out = append(out, wireField{prefix + f.Name, tag, f.Type, idx})
		}
	}
	return out
}

// checkMembers holds c's member list to T's fields: the same tags, types
// and addresses, in the same order.
func checkMembers[T any](t *testing.T, c *codec[T]) {
	t.Helper()
	var v T
	rv := reflect.ValueOf(&v).Elem()
	fields := wireFields(t, rv.Type(), nil, rv.Type().Name()+".")
	var want, got []string // `"tag" type`
	for _, f := range fields {
		want = append(want, fmt.Sprintf("%q %v", f.tag, f.typ))
	}
	for _, m := range c.members {
		got = append(got, fmt.Sprintf("%q %v", m.tag, m.typ))
	}
	if !slices.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		at := func(list []string) string {
			if i < len(list) {
				return list[i]
			}
			return "nothing"
		}
		t.Fatalf("the codec's list (samplecodec.go, journalcodec.go) is not %s's fields: at %d the struct has %s, the codec %s. "+
			"The codec lists every field, in the struct's order, with its json tag:\n\tstruct:\n\t\t%s\n\tcodec:\n\t\t%s",
			rv.Type(), i, at(want), at(got), strings.Join(want, "\n\t\t"), strings.Join(got, "\n\t\t"))
	}
	for i, m := range c.members {
		if got, want := reflect.ValueOf(m.addr(&v)).Pointer(), rv.FieldByIndex(fields[i].index).Addr().Pointer(); got != want {
			t.Errorf("member %q reads and writes another field than %s", m.tag, fields[i].path)
		}
	}
}

// TestCodecFields fails when a field is added to (or changed in) a struct
// with a codec, or to Header, and not to the codec's list.
func TestCodecFields(t *testing.T) {
	for _, cc := range codecCases() {
		t.Run(cc.name, cc.check)
	}
}

// fillWire sets every field of the struct at v to a value of its own, none
// zero, strings with characters json.Marshal escapes.
func fillWire(t *testing.T, v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2025, 11, 29, 20, 0, *n, 512_000_000, time.FixedZone("", 90*60))))
			return
		}
		for i := range v.NumField() {
			fillWire(t, v.Field(i), n)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d <&> \u2028 \"é\"\n", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * 1_000_003)
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(fmt.Sprintf(` {"n": %d, "s": ["<&>", {}], "t": null} `, *n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fillWire(t, s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fillWire(t, k, n)
			k.SetString(fmt.Sprintf("%c%s", 'c'-i, k.String())) // written sorted, not in this order
			fillWire(t, e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillWire(t, p.Elem(), n)
		v.Set(p)
	default:
		t.Fatalf("fill: no value for a %v", v.Type())
	}
}

// Every field of every codec's struct is written as json.Marshal writes it
// and read back as encoding/json reads it, set or zero: a member whose
// reader or writer misses its field fails here.
func TestCodecEveryField(t *testing.T) {
	for _, cc := range codecCases() {
		t.Run(cc.name, func(t *testing.T) {
			full := reflect.New(cc.typ)
			n := 0
			fillWire(t, full.Elem(), &n)
			for _, v := range []reflect.Value{full, reflect.New(cc.typ)} {
				want, err := json.Marshal(v.Interface())
				if err != nil {
					t.Fatal(err)
				}
				got, back, took := cc.roundTrip(t, v.Interface())
				if !bytes.Equal(got, want) {
					t.Errorf("codec wrote\n%s\njson.Marshal\n%s", got, want)
				}
				if cc.writeOnly {
					continue
				}
				if !took {
					t.Fatalf("the codec left its own output to the reflection path: %s", got)
				}
				ref := reflect.New(cc.typ)
				if err := json.Unmarshal(want, ref.Interface()); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(back, ref.Interface()) {
					t.Errorf("codec read\n%+v\nencoding/json\n%+v", back, ref.Interface())
				}
			}
		})
	}
}

// The codec gives up on a target that is not zero (encoding/json would
// keep what the message leaves out) and leaves it as it was.
func TestCodecSetTarget(t *testing.T) {
	data := []byte(`{"index":1,"seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw"}`)
	m := SampleMember{Temperature: 0.5}
	if sampleMemberCodec.decode(data, &m) || m != (SampleMember{Temperature: 0.5}) {
		t.Errorf("decode into a set member: %+v", m)
	}
	var z SampleMember
	if !sampleMemberCodec.decode(data, &z) || z.Index != 1 || z.Token != "q3Yh0vJ2_kQ9mC1xZpL8aw" {
		t.Errorf("decode into a zero member: %+v", z)
	}
	bad := []byte(`{"index":1,"seed":2,"token":"q3Yh0vJ2_kQ9mC1xZpL8aw","x":1}`)
	z = SampleMember{}
	if sampleMemberCodec.decode(bad, &z) || z != (SampleMember{}) {
		t.Errorf("a decode that gave up left %+v", z)
	}
}
