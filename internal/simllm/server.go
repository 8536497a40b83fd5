package simllm

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// Stats counts what the server did. All counters concern
// POST /v1/chat/completions; Requests = Completions + RateLimited +
// ServerErrors + BadRequests + Unauthorized + Canceled + UnknownModels, and
// Choices = Correct + Wrong + Malformed + Overlong + Unrecognized +
// BreakGlass.
type Stats struct {
	Requests         int64 `json:"requests"`
	Completions      int64 `json:"completions"` // model calls that produced choices
	Choices          int64 `json:"choices"`
	Correct          int64 `json:"correct"`
	Wrong            int64 `json:"wrong"`
	Malformed        int64 `json:"malformed"`
	Overlong         int64 `json:"overlong"` // includes replies cut at max_tokens
	Unrecognized     int64 `json:"unrecognized"`
	BreakGlass       int64 `json:"break_glass"` // answers to break-glass panel and judge prompts
	RateLimited      int64 `json:"rate_limited"`
	OverLimit        int64 `json:"over_limit"` // of RateLimited: beyond Config.RPM or TPM
	ServerErrors     int64 `json:"server_errors"`
	BadRequests      int64 `json:"bad_requests"` // 400, 405 and 413
	Unauthorized     int64 `json:"unauthorized"`
	Canceled         int64 `json:"canceled"`       // client left before the answer
	UnknownModels    int64 `json:"unknown_models"` // 404 model_not_found
	PromptTokens     int64 `json:"prompt_tokens"`
	CachedTokens     int64 `json:"cached_tokens"` // of PromptTokens, served from the prompt cache
	CompletionTokens int64 `json:"completion_tokens"`
	LogErrors        int64 `json:"log_errors"` // failed writes to Config.LogRequests
}

type counters struct {
	requests, completions, choices                       atomic.Int64
	correct, wrong, malformed, overlong, unrecognized    atomic.Int64
	breakGlass                                           atomic.Int64
	rateLimited, serverErrors, badRequests, unauthorized atomic.Int64
	canceled, promptTokens, completionTokens, logErrors  atomic.Int64
	unknownModels, overLimit, cachedTokens               atomic.Int64
}

// Server is the simulated model, an http.Handler. It is safe for
// concurrent use.
type Server struct {
	cfg         Config
	fingerprint string
	models      *models
	idBase      uint64
	idSeq       atomic.Uint64
	st          counters

	faultMu  sync.Mutex // guards faultRNG
	faultRNG *rand.Rand // transport faults and jitter only, never content

	timesMu sync.Mutex
	times   map[uint64]int // arrivals per "X-Sim-Fault: ...; times=N" request

	logMu sync.Mutex // serializes Config.LogRequests writes

	specs *specs // the task specs hinted requests name

	limits *limits     // Config.RPM and TPM
	cache  promptCache // prompt prefixes seen (cache.go)
}

var _ http.Handler = (*Server)(nil)

// New validates cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	seed := uint64(cfg.Seed)
	s := &Server{
		cfg:         cfg,
		fingerprint: "fp_sim" + strconv.FormatUint(mix(seed, math.Float64bits(cfg.Accuracy))&0xffffffff, 16),
		idBase:      mix(uint64(time.Now().UnixNano()), seed),
		faultRNG:    rand.New(rand.NewPCG(mix(seed, 0xfa017), mix(seed, 0x5eed))),
		times:       make(map[uint64]int),
		specs:       newSpecs(cfg.Tasks, cfg.Inputs),
		limits:      newLimits(cfg.RPM, cfg.TPM, cfg.Now),
	}
	s.models = newModels(cfg)
	return s, nil
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	c := &s.st
	return Stats{
		Requests: c.requests.Load(), Completions: c.completions.Load(), Choices: c.choices.Load(),
		Correct: c.correct.Load(), Wrong: c.wrong.Load(), Malformed: c.malformed.Load(),
		Overlong: c.overlong.Load(), Unrecognized: c.unrecognized.Load(), BreakGlass: c.breakGlass.Load(),
		RateLimited: c.rateLimited.Load(), ServerErrors: c.serverErrors.Load(),
		BadRequests: c.badRequests.Load(), Unauthorized: c.unauthorized.Load(),
		Canceled: c.canceled.Load(), PromptTokens: c.promptTokens.Load(),
		CompletionTokens: c.completionTokens.Load(), LogErrors: c.logErrors.Load(),
		UnknownModels: c.unknownModels.Load(), OverLimit: c.overLimit.Load(), CachedTokens: c.cachedTokens.Load(),
	}
}

// ServeHTTP routes the endpoints listed in the package comment.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == "/sim/stats":
		if !allowMethod(w, r, http.MethodGet) {
			return
		}
		b, _ := json.Marshal(s.Stats())
		writeJSON(w, http.StatusOK, b)
	case path == "/v1/chat/completions":
		s.st.requests.Add(1)
		if !s.authorized(w, r, true) {
			return
		}
		if !allowMethod(w, r, http.MethodPost) {
			s.st.badRequests.Add(1)
			return
		}
		s.chat(w, r)
	case strings.HasPrefix(path, "/v1/"):
		if !s.authorized(w, r, false) {
			return
		}
		switch {
		case path == "/v1/models" || strings.HasPrefix(path, "/v1/models/") && path != "/v1/models/":
			s.serveModels(w, r)
		default:
			notFound(w, r)
		}
	default:
		notFound(w, r)
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")"})
}

func allowMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
		message: "Method " + r.Method + " is not allowed on " + r.URL.Path + "; use " + method + "."})
	return false
}

// authorized checks the bearer key; chat selects the counter.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, chat bool) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(s.cfg.APIKey)) == 1 {
		return true
	}
	if chat {
		s.st.unauthorized.Add(1)
	}
	e := &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
		message: "Incorrect API key provided: " + maskKey(key) + "."}
	if auth == "" {
		e.code = ""
		e.message = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	}
	writeError(w, e)
	return false
}

// maskKey shows only a key's ends, as OpenAI does; a short key not at all.
func maskKey(k string) string {
	if len(k) < 8 {
		return "***"
	}
	return k[:3] + "***" + k[len(k)-4:]
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 { // keep huge bodies out of the pool
		*bp = (*bp)[:0]
		bufPool.Put(bp)
	}
}

// chat answers POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	bp := getBuf()
	defer putBuf(bp)
	body, err := readBody(w, r, (*bp)[:0])
	*bp = body
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			s.st.badRequests.Add(1)
			writeError(w, &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
				message: "Request body too large: the limit is " + strconv.Itoa(MaxBodyBytes) + " bytes."})
		case r.Context().Err() != nil:
			s.st.canceled.Add(1)
		default:
			s.st.badRequests.Add(1)
			writeError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: "Could not read the request body: " + err.Error()})
		}
		return
	}

	req, aerr := decodeRequest(body)
	if aerr == nil || aerr.logged {
		s.logRequest(body, req.temperatureSet)
	}
	if h, ok := llm.ReadSimHint(r.Header); ok && req != nil {
		req.hint = &h
	}
	if aerr == nil {
		aerr = req.validate()
	}
	if aerr != nil {
		s.st.badRequests.Add(1)
		writeError(w, aerr)
		return
	}
	if !s.models.serves(req.Model) {
		s.st.unknownModels.Add(1)
		writeError(w, modelNotFound(req.Model))
		return
	}

	if wait, which, ok := s.limits.admit(); !ok {
		s.st.rateLimited.Add(1)
		s.st.overLimit.Add(1)
		s.limits.headers(w.Header())
		s.writeLimited(w, which, wait)
		return
	}
	fault, jitter, aerr := s.transport(r, body)
	if aerr != nil {
		s.st.badRequests.Add(1)
		writeError(w, aerr)
		return
	}
	if fault == faultRateLimit {
		s.st.rateLimited.Add(1)
		s.writeRateLimit(w)
		return
	}
	if bg, ok := readBreakGlass(req, body); ok {
		if s.breakGlassFault(w, r, bg) {
			return
		}
		req.breakGlass = bg
	}
	if d := s.cfg.Latency + jitter; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.st.canceled.Add(1)
			return
		}
	}
	if fault == faultServerError {
		s.st.serverErrors.Add(1)
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "server_error",
			message: "The server had an error while processing your request. Sorry about that!"})
		return
	}

	id := s.nextID()
	a := s.generate(req, body)
	s.limits.charge(req.promptTokens + a.completionTokens)
	s.limits.headers(w.Header())
	op := getBuf()
	defer putBuf(op)
	w.Header()["X-Request-Id"] = []string{"req_" + string(id[:])}
	if req.stream {
		s.writeStream(w, req, id, a, (*op)[:0])
		return
	}
	*op = s.appendCompletion((*op)[:0], req, id, a)
	writeJSON(w, http.StatusOK, *op)
}

// readBody reads the whole body into buf, at most MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return buf, &http.MaxBytesError{Limit: MaxBodyBytes}
	}
	rd := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// generated is what the model generated for a request, rendered as one
// chat.completion or as a stream of chunks.
type generated struct {
	choices          []choice
	completionTokens int
	cachedTokens     int // of the prompt, served from the prompt cache (cache.go)
}

// generate draws the request's choices and counts them.
func (s *Server) generate(req *chatRequest, body []byte) generated {
	var st *step
	if p, ok := readPrompt(req.texts); ok {
		st, _ = newStep(p)
	}
	var sst *specStep
	why := ""
	if st == nil && req.hint != nil {
		sst, why = s.specs.step(*req.hint)
	}
	pEff := s.cfg.effective(s.accuracy(req.msgHash), req.temperature)

	// Content depends only on these inputs (see Determinism in doc.go).
	greedy := req.temperature == 0
	base := mix(uint64(s.cfg.Seed), req.msgHash)
	base = mix(base, math.Float64bits(req.temperature))
	if !greedy {
		if req.Seed != nil {
			base = mix(base, uint64(*req.Seed))
		} else {
			base = mix(base^0xb0d7, hashBytes(body)) // seedless: the body stands in
		}
	}

	a := generated{choices: make([]choice, req.n)}
	for i := range req.n {
		idx := uint64(i)
		if greedy {
			idx = 0
		}
		k := mix(base, idx)
		rng := rand.New(rand.NewPCG(k, mix(k, 0x9e37)))
		var c choice
		switch {
		case req.breakGlass != nil:
			c = breakGlassChoice(breakGlassReply(req.breakGlass), req.limit)
		case sst != nil:
			c = generateSpec(rng, sst, pEff, s.cfg.OverlongRate, s.cfg.MalformedRate, s.cfg.WrongSpread, req.limit)
		case st == nil:
			c = unanswerable(rng, req.hint != nil, why, req.limit)
		default:
			c = generate(rng, st, pEff, s.cfg.OverlongRate, s.cfg.MalformedRate, s.cfg.WrongSpread, req.limit)
		}
		s.count(c.outcome)
		a.completionTokens += c.tokens
		a.choices[i] = c
	}
	a.cachedTokens = s.cache.served(req.prefixHash, req.prefixTokens)
	s.st.completions.Add(1)
	s.st.choices.Add(int64(req.n))
	s.st.promptTokens.Add(int64(req.promptTokens))
	s.st.cachedTokens.Add(int64(a.cachedTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
	return a
}

// appendCompletion appends a as one chat.completion object.
func (s *Server) appendCompletion(out []byte, req *chatRequest, id [24]byte, a generated) []byte {
	out = append(out, `{"id":"chatcmpl-`...)
	out = append(out, id[:]...)
	out = append(out, `","object":"chat.completion","created":`...)
	out = appendInt(out, time.Now().Unix())
	out = append(out, `,"model":`...)
	out = plainjson.AppendString(out, req.Model)
	out = append(out, `,"choices":[`...)
	for i, c := range a.choices {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"index":`...)
		out = appendInt(out, int64(i))
		out = append(out, `,"message":{"role":"assistant","content":`...)
		out = plainjson.AppendString(out, c.content)
		out = append(out, `,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"`...)
		out = append(out, c.finish...)
		out = append(out, `"}`...)
	}
	out = append(out, `],"usage":`...)
	out = appendUsage(out, req.promptTokens, a.completionTokens, a.cachedTokens)
	out = append(out, `,"service_tier":"default","system_fingerprint":`...)
	out = plainjson.AppendString(out, s.fingerprint)
	return append(out, '}')
}

// appendUsage appends a usage object as OpenAI writes it.
func appendUsage(out []byte, prompt, completion, cached int) []byte {
	out = append(out, `{"prompt_tokens":`...)
	out = appendInt(out, int64(prompt))
	out = append(out, `,"completion_tokens":`...)
	out = appendInt(out, int64(completion))
	out = append(out, `,"total_tokens":`...)
	out = appendInt(out, int64(prompt+completion))
	out = append(out, `,"prompt_tokens_details":{"cached_tokens":`...)
	out = appendInt(out, int64(cached))
	return append(out, `,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
}

// accuracy is the model's accuracy for the step whose messages hash to
// msgHash: HardAccuracy for the HardFraction of steps the hash picks, else
// Accuracy. Every sample of a step has the same messages, so they agree.
func (s *Server) accuracy(msgHash uint64) float64 {
	if f := s.cfg.HardFraction; f > 0 {
		u := float64(mix(uint64(s.cfg.Seed)^0x4a5d, msgHash)>>11) / (1 << 53)
		if u < f {
			return s.cfg.HardAccuracy
		}
	}
	return s.cfg.Accuracy
}

func (s *Server) count(o outcome) {
	switch o {
	case outCorrect:
		s.st.correct.Add(1)
	case outWrong:
		s.st.wrong.Add(1)
	case outMalformed:
		s.st.malformed.Add(1)
	case outOverlong:
		s.st.overlong.Add(1)
	case outBreakGlass:
		s.st.breakGlass.Add(1)
	default:
		s.st.unrecognized.Add(1)
	}
}

// nextID returns 24 hex digits, unique per server.
func (s *Server) nextID() [24]byte {
	n := s.idSeq.Add(1)
	a, b := mix(s.idBase, n), mix(n, s.idBase)
	var id [24]byte
	for i := range 16 {
		id[i] = hexDigits[a>>(4*i)&0xf]
	}
	for i := range 8 {
		id[16+i] = hexDigits[b>>(4*i)&0xf]
	}
	return id
}

// logRequest writes body as one compact JSON line, adding
// "temperature":null when the body has no temperature key.
func (s *Server) logRequest(body []byte, hasTemperature bool) {
	if s.cfg.LogRequests == nil {
		return
	}
	var buf bytes.Buffer
	buf.Grow(len(body) + 24)
	if err := json.Compact(&buf, body); err != nil {
		s.st.logErrors.Add(1)
		return
	}
	line := buf.Bytes()
	if !hasTemperature {
		line = line[:len(line)-1] // drop '}'
		if len(line) > 1 {
			line = append(line, ',')
		}
		line = append(line, `"temperature":null}`...)
	}
	line = append(line, '\n')
	s.logMu.Lock()
	_, err := s.cfg.LogRequests.Write(line)
	s.logMu.Unlock()
	if err != nil {
		s.st.logErrors.Add(1)
	}
}

// Transport faults.
const (
	faultNone = iota
	faultRateLimit
	faultServerError
)

// mix folds v into h (splitmix64 finalizer): cheap, well-spread seeds.
func mix(h, v uint64) uint64 {
	z := h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func hashBytes(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}
