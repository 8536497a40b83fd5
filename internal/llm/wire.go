package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// stateKey is the context key for the *attemptState of one HTTP attempt.
type stateKey struct{}

// attemptState carries inputs to, and observations from, the doer for one
// HTTP attempt. It travels in that attempt's request context, so concurrent
// calls never share one (go-openai exposes no response headers on errors).
// go-openai calls Do synchronously in the caller's goroutine, so the fields
// are written before Complete reads them and need no lock.
type attemptState struct {
	// Inputs.
	setTemperature bool
	temperature    float64
	headers        map[string]string // extra request headers
	maxBytes       int64             // bound of the reply's body (maxReplyBytes); 0: none

	// Observations.
	called       bool  // the request reached the doer, i.e. left go-openai
	localErr     error // the doer failed before sending; retrying cannot help
	status       int   // HTTP status; 0 when no response arrived
	retryAfter   string
	retryAfterMS string
}

// doer is the openai.HTTPDoer that go-openai sends through.
type doer struct {
	hc         *http.Client
	onResponse func(int, http.Header)
}

var _ openai.HTTPDoer = (*doer)(nil)

func (d *doer) Do(req *http.Request) (*http.Response, error) {
	st, _ := req.Context().Value(stateKey{}).(*attemptState)
	if st == nil {
		return d.hc.Do(req)
	}
	st.called = true
	for k, v := range st.headers {
		req.Header.Set(k, v)
	}
	if st.setTemperature {
		r2, err := withTemperature(req, st.temperature)
		if err != nil {
			st.localErr = err
			return nil, err
		}
		req = r2
	}
	resp, err := d.hc.Do(req)
	if resp != nil && d.onResponse != nil {
		d.onResponse(resp.StatusCode, resp.Header)
	}
	if resp != nil {
		st.status = resp.StatusCode
		st.retryAfter = resp.Header.Get("Retry-After")
		st.retryAfterMS = resp.Header.Get("Retry-After-Ms")
		if st.maxBytes > 0 && resp.Body != nil {
			resp.Body = &cappedBody{ReadCloser: resp.Body, left: st.maxBytes}
		}
	}
	return resp, err
}

// minReplyBytes is the least a reply's body may take (maxReplyBytes).
const minReplyBytes = 1 << 20

// maxReplyBytes bounds the body of one reply, streamed or not, to a call
// of maxTokens tokens (0: the server's default) and n choices: 16 × 4
// bytes a token and choice (JSON, SSE framing and escapes included), and
// at least 1 MiB. A body past it ends the attempt as a bad response, so a
// looping or hostile server cannot grow the caller's memory.
func maxReplyBytes(maxTokens, n int) int64 {
	return max(minReplyBytes, 16*4*int64(maxTokens)*int64(max(n, 1)))
}

// errReplyTooLarge: the reply's body passed maxReplyBytes.
var errReplyTooLarge = errors.New("reply larger than its bound")

// cappedBody is a response body that fails past its bound.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errReplyTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// withTemperature returns a shallow copy of req whose JSON body has
// "temperature" set to exactly t, replacing whatever go-openai wrote.
func withTemperature(req *http.Request, t float64) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, errors.New("llm: chat request has no body")
	}
	raw, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("llm: read request body: %w", err)
	}
	body, err := setTemperature(raw, t)
	if err != nil {
		return nil, err
	}
	r2 := req.WithContext(req.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	// net/http writes Content-Length from this field, never from Header.
	r2.ContentLength = int64(len(body))
	return r2, nil
}

// setTemperature sets the top-level "temperature" of a JSON object to t,
// written as the shortest decimal that round-trips the float64 (0.1 stays
// 0.1).
//
// Fast path, taken for every body go-openai writes (it never writes a
// temperature, see chatRequest): when the bytes hold no "temperature" key
// anywhere, the field is inserted after the opening brace without decoding
// the body. The quoted word cannot hide inside a JSON string, whose quotes
// are escaped. Otherwise the object is decoded into RawMessages, the field
// replaced and the object re-encoded, keeping every other field's meaning.
func setTemperature(raw []byte, t float64) ([]byte, error) {
	if !bytes.Contains(raw, []byte(`"temperature"`)) && json.Valid(raw) {
		trimmed := bytes.TrimLeft(raw, " \t\r\n")
		if len(trimmed) > 0 && trimmed[0] == '{' {
			rest := bytes.TrimLeft(trimmed[1:], " \t\r\n")
			out := make([]byte, 0, len(raw)+32)
			out = append(out, `{"temperature":`...)
			out = append(out, formatTemperature(t)...)
			if len(rest) > 0 && rest[0] != '}' {
				out = append(out, ',')
			}
			return append(out, rest...), nil
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("llm: request body is not a JSON object: %w", err)
	}
	if m == nil {
		return nil, errors.New("llm: request body is JSON null")
	}
	m["temperature"] = formatTemperature(t)
	return json.Marshal(m)
}

// formatTemperature writes t as a JSON number; -0 becomes 0.
func formatTemperature(t float64) json.RawMessage {
	if t == 0 {
		t = 0 // turns -0 into +0
	}
	return strconv.AppendFloat(nil, t, 'f', -1, 64)
}

// maxDelay bounds parsed delays so absurd headers cannot overflow.
const maxDelay = time.Duration(math.MaxInt64)

// parseRetryAfter turns the retry-after-ms and Retry-After headers into a
// delay. retry-after-ms (OpenAI, Azure) wins because it is finer. Retry-After
// is delay-seconds (fractions tolerated) or an HTTP-date relative to now.
func parseRetryAfter(ms, ra string, now time.Time) (time.Duration, bool) {
	if ms = strings.TrimSpace(ms); ms != "" {
		if d, ok := parseDelay(ms, float64(time.Millisecond)); ok {
			return d, true
		}
	}
	ra = strings.TrimSpace(ra)
	if ra == "" {
		return 0, false
	}
	if d, ok := parseDelay(ra, float64(time.Second)); ok {
		return d, true
	}
	if t, err := http.ParseTime(ra); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// parseDelay parses a non-negative finite number of units.
func parseDelay(s string, unit float64) (time.Duration, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	if f*unit >= float64(maxDelay) {
		return maxDelay, true
	}
	return time.Duration(f * unit), true
}
