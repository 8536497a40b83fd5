package simllm

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// transport decides this request's transport fault and latency jitter,
// from the X-Sim-Fault header or the seeded fault RNG.
func (s *Server) transport(r *http.Request, body []byte) (fault int, jitter time.Duration, _ *apiError) {
	if h := r.Header.Get("X-Sim-Fault"); h != "" {
		kind, times, ok := parseFaultHeader(h)
		if !ok {
			return 0, 0, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "X-Sim-Fault",
				message: `Invalid X-Sim-Fault header ` + strconv.Quote(h) + `: want "rate_limit" or "server_error", optionally followed by "; times=N".`}
		}
		fault = kind
		if times > 0 {
			key := mix(hashBytes([]byte(h)), hashBytes(body))
			s.timesMu.Lock()
			seen := s.times[key]
			if seen < times {
				s.times[key] = seen + 1
			} else {
				fault = faultNone
			}
			if len(s.times) > 1<<16 { // a test aid, not a store: stay bounded
				clear(s.times)
			}
			s.timesMu.Unlock()
		}
	}
	rl, se, jmax := s.cfg.RateLimitRate, s.cfg.ServerErrorRate, s.cfg.LatencyJitter
	if rl+se == 0 && jmax == 0 {
		return fault, 0, nil
	}
	s.faultMu.Lock()
	if rl+se > 0 {
		u := s.faultRNG.Float64()
		if fault == faultNone {
			switch {
			case u < rl:
				fault = faultRateLimit
			case u < rl+se:
				fault = faultServerError
			}
		}
	}
	if jmax > 0 {
		jitter = time.Duration(s.faultRNG.Int64N(int64(jmax)))
	}
	s.faultMu.Unlock()
	return fault, jitter, nil
}

// parseFaultHeader reads "rate_limit" or "server_error", optionally with
// "; times=N" (N >= 1).
func parseFaultHeader(h string) (kind, times int, ok bool) {
	name, opt, hasOpt := strings.Cut(h, ";")
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "rate_limit":
		kind = faultRateLimit
	case "server_error":
		kind = faultServerError
	default:
		return 0, 0, false
	}
	if !hasOpt {
		return kind, 0, true
	}
	v, found := strings.CutPrefix(strings.TrimSpace(opt), "times=")
	if !found {
		return 0, 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, 0, false
	}
	return kind, n, true
}

func (s *Server) writeRateLimit(w http.ResponseWriter) {
	msg := "Rate limit reached for requests (simulated)."
	if ra := s.cfg.RetryAfter; ra > 0 {
		secs := int64((ra + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(ra.Milliseconds(), 10))
		msg += " Please try again in " + ra.String() + "."
	}
	writeError(w, &apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded", message: msg})
}

// writeLimited answers a call beyond Config.RPM or TPM as OpenAI does:
// 429 rate_limit_exceeded, with the wait until it would fit.
func (s *Server) writeLimited(w http.ResponseWriter, which string, wait time.Duration) {
	wait = max(wait, time.Millisecond)
	w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
	writeError(w, &apiError{status: http.StatusTooManyRequests, typ: which, code: "rate_limit_exceeded",
		message: "Rate limit reached for " + which + " per minute (simulated). Please try again in " + wait.Round(time.Millisecond).String() + "."})
}

// apiError is an OpenAI error response; empty param and code encode as null.
type apiError struct {
	status                    int
	message, typ, param, code string
	logged                    bool // the body was a JSON object: log it anyway
}

func writeError(w http.ResponseWriter, e *apiError) {
	b := make([]byte, 0, 128+len(e.message))
	b = append(b, `{"error":{"message":`...)
	b = plainjson.AppendString(b, e.message)
	b = append(b, `,"type":`...)
	b = plainjson.AppendString(b, e.typ)
	b = append(b, `,"param":`...)
	b = appendNullable(b, e.param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, e.code)
	b = append(b, "}}"...)
	writeJSON(w, e.status, b)
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return plainjson.AppendString(b, s)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
