package schemas

import "encoding/json"

// DecodeReflect is Decode by reflection alone: strict encoding/json and
// checkKeys, the path the codecs are held to.
func DecodeReflect(data []byte, m Message) error { return decode(data, m, false) }

// EncodeReflect is Encode by reflection alone: Validate, then json.Marshal.
func EncodeReflect(m Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// DecodeFast reports whether the codec of m's kind reads data itself
// (false: it leaves data to the reflection path); m is then read, not
// validated.
func DecodeFast(data []byte, m Message) bool {
	switch m := m.(type) {
	case *SampleRequest:
		return sampleRequestCodec.decode(data, m)
	case *SampleResult:
		return sampleResultCodec.decode(data, m)
	}
	return false
}
