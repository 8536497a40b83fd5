package schemas_test

import (
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
