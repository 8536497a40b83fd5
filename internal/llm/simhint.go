package llm

import (
	"encoding/base64"
	"net/http"
)

// SimHint tells the simulated model (internal/simllm) which step of which
// task a request is, so it can answer a task spec from the spec's
// reference answer: a model reads only the prompt, and a spec's prompt
// cannot be read back into its state. Voters send it only when told to
// (voter.Config.SimHints): a real model gets nothing of it.
type SimHint struct {
	// Task, Version and Hash name the task (the spec's, pinned by the job).
	Task, Version, Hash string
	// Params and State are the job's params and the step's state, JSON.
	Params, State []byte
	// ParamsRef names the params in the fleet's inputs store instead
	// (schemas.SampleRequest.ParamsRef): Params is then empty.
	ParamsRef string
}

// Header names of a SimHint.
const (
	hintTask    = "X-Maker-Task"
	hintVersion = "X-Maker-Task-Version"
	hintHash    = "X-Maker-Task-Hash"
	hintParams  = "X-Maker-Params"
	hintRef     = "X-Maker-Params-Ref"
	hintState   = "X-Maker-State"
)

// Headers are h as request headers (params and state in base64).
func (h SimHint) Headers() map[string]string {
	hd := map[string]string{
		hintTask: h.Task, hintVersion: h.Version, hintHash: h.Hash,
		hintState: base64.StdEncoding.EncodeToString(h.State),
	}
	if h.ParamsRef != "" {
		hd[hintRef] = h.ParamsRef
	} else {
		hd[hintParams] = base64.StdEncoding.EncodeToString(h.Params)
	}
	return hd
}

// ReadSimHint reads a SimHint from request headers; ok is false when
// there is none, or it is unreadable.
func ReadSimHint(hd http.Header) (h SimHint, ok bool) {
	h.Task, h.Version, h.Hash = hd.Get(hintTask), hd.Get(hintVersion), hd.Get(hintHash)
	if h.Task == "" {
		return SimHint{}, false
	}
	var err1, err2 error
	h.ParamsRef = hd.Get(hintRef)
	h.Params, err1 = base64.StdEncoding.DecodeString(hd.Get(hintParams))
	h.State, err2 = base64.StdEncoding.DecodeString(hd.Get(hintState))
	if err1 != nil || err2 != nil {
		return SimHint{}, false
	}
	return h, true
}
