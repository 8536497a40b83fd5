package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// mediaType checks the request's Content-Type against allowed (an absent
// one is taken as the first) and returns it: 415 otherwise.
func mediaType(r *http.Request, allowed ...string) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return allowed[0], nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", problem(TypeUnsupportedMedia, "Content-Type %q does not parse; send %s", ct, strings.Join(allowed, " or "))
	}
	for _, a := range allowed {
		if mt == a {
			return mt, nil
		}
	}
	return "", problem(TypeUnsupportedMedia, "Content-Type %s is not accepted here; send %s", mt, strings.Join(allowed, " or "))
}

// drainMax bounds what the server reads of a body over its limit before
// it answers 413: a client that is still sending would otherwise see its
// connection reset instead of the answer. A longer body is cut off.
const drainMax = 16 << 20

// limitBody bounds r's body to limit bytes: a declared length above it is
// refused at once (413), a longer body fails its read with
// *http.MaxBytesError.
func limitBody(w http.ResponseWriter, r *http.Request, limit int64) error {
	if r.ContentLength > limit {
		if r.ContentLength <= drainMax {
			_, _ = io.CopyN(io.Discard, r.Body, r.ContentLength)
		}
		return tooLarge(limit)
	}
	r.Body = &cappedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), orig: r.Body}
	return nil
}

// cappedBody is a body bounded by http.MaxBytesReader that, once over the
// limit, reads on (up to drainMax) so the 413 reaches the client.
type cappedBody struct {
	io.ReadCloser
	orig    io.Reader
	drained bool
}

func (c *cappedBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && !c.drained && errors.As(err, &mbe) {
		c.drained = true
		_, _ = io.CopyN(io.Discard, c.orig, drainMax)
	}
	return n, err
}

func tooLarge(limit int64) *problemError {
	return problem(TypeTooLarge, "the request body is over the limit of %d bytes", limit)
}

// readBody reads r's whole body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := limitBody(w, r, limit); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err, limit)
	}
	return b, nil
}

// bodyError is the problem of a failed body read.
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(limit)
	}
	return problem(TypeBadRequest, "the request body could not be read: %v", err)
}

// decodeJSON reads r's body, a JSON object of at most limit bytes, into v
// strictly: no unknown fields, nothing after the object. A body that is not
// JSON is 400; a field of the wrong type or unknown is 422 naming it.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if _, err := mediaType(r, "application/json"); err != nil {
		return err
	}
	b, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return problem(TypeBadRequest, "the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return problem(TypeBadRequest, "the request body holds more than one JSON value")
	}
	return nil
}

// jsonError is the problem of a JSON body that did not decode.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return problem(TypeBadRequest, "the request body is not JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problem(TypeBadRequest, "the request body is not JSON: it ends too early")
	case errors.As(err, &typ):
		path := "/" + strings.ReplaceAll(typ.Field, ".", "/")
		if typ.Field == "" {
			return problem(TypeBadRequest, "the request body must be a JSON object, not %s", typ.Value)
		}
		return invalidField(path, "%s must be %s, not %s", path[1:], jsonType(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return invalidField("/"+name, "unknown field %q", name)
	}
	return invalidField("", "%v", err)
}

// jsonType names a Go kind the way JSON does.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice":
		return "an array"
	}
	return "an object"
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("api: encode answer: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}
