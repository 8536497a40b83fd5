package simllm

import (
	"bytes"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// A request with "stream": true is answered with server-sent events, as
// OpenAI sends them: per choice a first chunk with the role, the content
// in deltas of at most deltaBytes (cut after a space where one is near, never
// inside a UTF-8 sequence), a chunk with the finish_reason; with
// stream_options.include_usage every chunk has "usage": null and a last
// chunk with no choices carries the usage; then "data: [DONE]". Faults and
// latency come before the first byte, as plain HTTP errors.

// deltaBytes bounds a content delta: about six tokens.
const deltaBytes = 24

// nextDelta returns the length of the next content delta of s (len(s) when
// s is short): up to deltaBytes, ending after the last space or newline in
// that window, else at the last rune start in it.
func nextDelta(s string) int {
	if len(s) <= deltaBytes {
		return len(s)
	}
	for i := deltaBytes; i > deltaBytes/2; i-- {
		if c := s[i-1]; c == ' ' || c == '\n' {
			return i
		}
	}
	i := deltaBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	if i == 0 { // not UTF-8 at all: cut anywhere
		return deltaBytes
	}
	return i
}

// chunkWriter appends the chunk events of one streamed completion.
type chunkWriter struct {
	head  []byte // `data: {"id":...,"choices":[` shared by every chunk
	usage bool   // include_usage: "usage":null on every chunk
}

func (s *Server) newChunkWriter(req *chatRequest, id [24]byte) chunkWriter {
	h := make([]byte, 0, 192+len(req.Model))
	h = append(h, `data: {"id":"chatcmpl-`...)
	h = append(h, id[:]...)
	h = append(h, `","object":"chat.completion.chunk","created":`...)
	h = appendInt(h, time.Now().Unix())
	h = append(h, `,"model":`...)
	h = plainjson.AppendString(h, req.Model)
	h = append(h, `,"service_tier":"default","system_fingerprint":`...)
	h = plainjson.AppendString(h, s.fingerprint)
	h = append(h, `,"choices":[`...)
	return chunkWriter{head: h, usage: req.includeUsage}
}

// appendChoice appends one chunk for choice index with the given delta
// (a JSON object) and finish_reason ("" for null).
func (cw chunkWriter) appendChoice(out []byte, index int, delta []byte, finish string) []byte {
	out = append(out, cw.head...)
	out = append(out, `{"index":`...)
	out = appendInt(out, int64(index))
	out = append(out, `,"delta":`...)
	out = append(out, delta...)
	out = append(out, `,"logprobs":null,"finish_reason":`...)
	out = appendNullable(out, finish)
	out = append(out, '}', ']')
	if cw.usage {
		out = append(out, `,"usage":null`...)
	}
	return append(out, "}\n\n"...)
}

var (
	roleDelta  = []byte(`{"role":"assistant","content":"","refusal":null}`)
	emptyDelta = []byte(`{}`)
)

// appendChoiceEvents appends every chunk of choice index but the role one.
func (cw chunkWriter) appendChoiceEvents(out []byte, index int, c choice) []byte {
	delta := make([]byte, 0, 32+2*deltaBytes)
	for rest := c.content; rest != ""; {
		n := nextDelta(rest)
		delta = append(delta[:0], `{"content":`...)
		delta = plainjson.AppendString(delta, rest[:n])
		delta = append(delta, '}')
		out = cw.appendChoice(out, index, delta, "")
		rest = rest[n:]
	}
	return cw.appendChoice(out, index, emptyDelta, c.finish)
}

// appendEnd appends the usage chunk (with include_usage) and [DONE].
func (cw chunkWriter) appendEnd(out []byte, promptTokens, completionTokens, cachedTokens int) []byte {
	if cw.usage {
		out = append(out, cw.head...)
		out = append(out, `],"usage":`...)
		out = appendUsage(out, promptTokens, completionTokens, cachedTokens)
		out = append(out, "}\n\n"...)
	}
	return append(out, "data: [DONE]\n\n"...)
}

// appendStream appends the whole event stream of a.
func (cw chunkWriter) appendStream(out []byte, promptTokens int, a generated) []byte {
	for i, c := range a.choices {
		out = cw.appendChoice(out, i, roleDelta, "")
		out = cw.appendChoiceEvents(out, i, c)
	}
	return cw.appendEnd(out, promptTokens, a.completionTokens, a.cachedTokens)
}

// writeStream sends a as server-sent events: the first chunk is flushed on
// its own, so a client sees the stream open at once, the rest follows in
// one write. A client that leaves mid-stream is not an error.
func (s *Server) writeStream(w http.ResponseWriter, req *chatRequest, id [24]byte, a generated, buf []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"text/event-stream; charset=utf-8"}
	h["Cache-Control"] = []string{"no-cache"}
	w.WriteHeader(http.StatusOK)
	buf = s.newChunkWriter(req, id).appendStream(buf, req.promptTokens, a)
	first := bytes.Index(buf, []byte("\n\n")) + 2
	if _, err := w.Write(buf[:first]); err != nil {
		return
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	_, _ = w.Write(buf[first:])
}
