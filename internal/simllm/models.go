package simllm

import (
	"net/http"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// modelCreated is the fixed "created" time /v1/models reports.
const modelCreated = 1735689600 // 2025-01-01T00:00:00Z

// models is the set of model ids a server answers (Config.Model and
// Config.Models) and their /v1/models bodies, built once by New.
type models struct {
	any    bool              // Models empty, or holding AnyModel
	listed []string          // Model first, then Models, without AnyModel or repeats
	bodies map[string][]byte // GET /v1/models/{id}
	list   []byte            // GET /v1/models
}

func newModels(cfg Config) *models {
	m := &models{any: len(cfg.Models) == 0, bodies: make(map[string][]byte)}
	m.list = append(m.list, `{"object":"list","data":[`...)
	for _, id := range append([]string{cfg.Model}, cfg.Models...) {
		if id == AnyModel {
			m.any = true
			continue
		}
		if slices.Contains(m.listed, id) {
			continue
		}
		if len(m.listed) > 0 {
			m.list = append(m.list, ',')
		}
		m.listed = append(m.listed, id)
		m.bodies[id] = appendModel(nil, id)
		m.list = append(m.list, m.bodies[id]...)
	}
	m.list = append(m.list, "]}"...)
	return m
}

// serves reports whether a chat request may name model: its name before
// any "@fault" suffix is served.
func (m *models) serves(model string) bool {
	if m.any {
		return true
	}
	name, _, _ := strings.Cut(model, "@")
	_, ok := m.bodies[name]
	return ok
}

// serveModels answers GET /v1/models and GET /v1/models/{id}: the listed
// ids only (AnyModel serves chat requests for any name, but lists none).
func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r, http.MethodGet) {
		return
	}
	id, one := strings.CutPrefix(r.URL.Path, "/v1/models/")
	if !one {
		writeJSON(w, http.StatusOK, s.models.list)
		return
	}
	b, ok := s.models.bodies[id]
	if !ok {
		// OpenAI's retrieve answer differs from its chat one in param and text.
		writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			message: "The model '" + id + "' does not exist or you do not have access to it."})
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// modelNotFound is OpenAI's answer to a chat request for a model it does
// not have, word for word.
func modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
		message: "The model `" + model + "` does not exist or you do not have access to it."}
}

func appendModel(b []byte, id string) []byte {
	b = append(b, `{"id":`...)
	b = plainjson.AppendString(b, id)
	b = append(b, `,"object":"model","created":`...)
	b = appendInt(b, modelCreated)
	return append(b, `,"owned_by":"makerfleet"}`...)
}
