package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// checkKeys rejects what encoding/json lets through but stricter readers do
// not: a key that matches a field only case-insensitively (encoding/json
// folds case, so "Job_ID" or "\u212a" would set JobID or K) and a repeated
// key (encoding/json keeps the last, many parsers the first). Raw JSON
// (params, state) is the task's to read; only its keys' uniqueness is
// checked.
//
// data must be one valid JSON value that decoded into t: Decode has checked
// that, so this is a plain scan rather than a second parse, which would
// cost more than the decode itself.
func checkKeys(data []byte, t reflect.Type) error {
	s := keyScanner{data: data}
	if err := s.value(t); err != nil {
		return err
	}
	if s.next() != 0 {
		return errScan
	}
	return nil
}

var errScan = errors.New("malformed JSON")

type keyScanner struct {
	data []byte
	i    int
}

func (s *keyScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// next skips space and returns the next byte, 0 at the end.
func (s *keyScanner) next() byte {
	s.space()
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *keyScanner) value(t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch s.next() {
	case '{':
		return s.object(t)
	case '[':
		elem := anyType
		if k := t.Kind(); (k == reflect.Slice || k == reflect.Array) && t != rawMessageType {
			elem = t.Elem()
		}
		s.i++
		if s.next() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(elem); err != nil {
				return err
			}
			switch s.next() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return errScan
			}
		}
	case '"':
		return s.skipString()
	case 0:
		return errScan
	default: // number, true, false or null
		for s.i < len(s.data) && !endsLiteral(s.data[s.i]) {
			s.i++
		}
		return nil
	}
}

func endsLiteral(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func (s *keyScanner) object(t reflect.Type) error {
	s.i++ // {
	var fields map[string]reflect.Type
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	var buf [32][]byte
	seen := keySet{list: buf[:0]}
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		if s.next() != '"' {
			return errScan
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if !seen.add(key) {
			return fmt.Errorf("duplicate key %q", key)
		}
		vt := anyType
		switch {
		case fields != nil:
			ft, ok := fields[string(key)]
			if !ok {
				return fmt.Errorf("unknown field %q (keys are case-sensitive)", key)
			}
			vt = ft
		case t.Kind() == reflect.Map:
			vt = t.Elem()
		}
		if s.next() != ':' {
			return errScan
		}
		s.i++
		if err := s.value(vt); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errScan
		}
	}
}

// skipString moves past the string at s.i.
func (s *keyScanner) skipString() error {
	for s.i++; s.i < len(s.data); s.i++ {
		switch s.data[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return nil
		}
	}
	return errScan
}

// str reads the string at s.i and returns it unescaped; unless it holds an
// escape, the result shares data's memory.
func (s *keyScanner) str() ([]byte, error) {
	start, escaped := s.i, false
	for s.i++; s.i < len(s.data); s.i++ {
		switch s.data[s.i] {
		case '\\':
			escaped = true
			s.i++ // the escaped byte; \uXXXX's digits hold no quote
		case '"':
			s.i++
			raw := s.data[start:s.i]
			if !escaped {
				return raw[1 : len(raw)-1], nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, err
			}
			return []byte(v), nil
		}
	}
	return nil, errScan
}

// keySet holds an object's keys: a list while small (no allocation for the
// few keys of a message), a map once large (no quadratic cost for a big
// object in raw params).
type keySet struct {
	list [][]byte
	m    map[string]bool
}

// add adds k and reports whether it was new.
func (ks *keySet) add(k []byte) bool {
	if ks.m != nil {
		if ks.m[string(k)] {
			return false
		}
		ks.m[string(k)] = true
		return true
	}
	for _, old := range ks.list {
		if bytes.Equal(old, k) {
			return false
		}
	}
	if len(ks.list) < 64 {
		ks.list = append(ks.list, k)
		return true
	}
	ks.m = make(map[string]bool, 2*len(ks.list))
	for _, old := range ks.list {
		ks.m[string(old)] = true
	}
	ks.m[string(k)] = true
	return true
}

var (
	anyType        = reflect.TypeFor[any]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	fieldCache     sync.Map // reflect.Type → map[string]reflect.Type
)

// jsonFields maps the JSON names of struct t's fields, embedded structs
// flattened, to their types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := make(map[string]reflect.Type)
	var add func(reflect.Type)
	add = func(t reflect.Type) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				add(f.Type)
			case f.IsExported():
				if name == "" {
					name = f.Name
				}
				fields[name] = f.Type
			}
		}
	}
	add(t)
	fieldCache.Store(t, fields)
	return fields
}
