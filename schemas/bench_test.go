package schemas_test

import (
	"encoding/json"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// Sample results are the hot path: one per model call.
func BenchmarkDecode(b *testing.B) {
	for _, mt := range schemas.All() {
		data := golden(b, mt.Kind)
		b.Run(mt.Kind, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := schemas.Decode(data, mt.New()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, mt := range schemas.All() {
		m := decodeGolden(b, mt.Kind)
		b.Run(mt.Kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schemas.Encode(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The sample messages' codecs beside the reflection path they replace,
// for typical messages (typicalSamples): fast is Decode and Encode (the
// codecs), reflect the same by reflection (strict encoding/json and
// checkKeys; Validate and json.Marshal). Both validate.
func BenchmarkSampleDecode(b *testing.B) {
	for _, tc := range typicalSamples(b) {
		data, err := json.Marshal(tc.msg)
		if err != nil {
			b.Fatal(err)
		}
		fresh := func() schemas.Message { return new(schemas.SampleResult) }
		if _, ok := tc.msg.(*schemas.SampleRequest); ok {
			fresh = func() schemas.Message { return new(schemas.SampleRequest) }
		}
		for _, path := range []struct {
			name   string
			decode func([]byte, schemas.Message) error
		}{{"fast", schemas.Decode}, {"reflect", schemas.DecodeReflect}} {
			b.Run(tc.name+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if err := path.decode(data, fresh()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSampleEncode: fast and reflect as in BenchmarkSampleDecode;
// append is what the voter and the coordinator do (AppendSampleResult,
// AppendSampleRequest into a buffer kept, no Validate), marshal what they
// did before (json.Marshal).
func BenchmarkSampleEncode(b *testing.B) {
	for _, tc := range typicalSamples(b) {
		m := tc.msg
		var buf []byte
		for _, path := range []struct {
			name   string
			encode func(schemas.Message) ([]byte, error)
		}{
			{"fast", schemas.Encode},
			{"reflect", schemas.EncodeReflect},
			{"append", func(m schemas.Message) ([]byte, error) {
				var err error
				buf, err = appendFast(buf[:0], m)
				return buf, err
			}},
			{"marshal", func(m schemas.Message) ([]byte, error) { return json.Marshal(m) }},
		} {
			b.Run(tc.name+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := path.encode(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
