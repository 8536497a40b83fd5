package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// replayTimeout bounds one replay request (up to schemas.MaxReplaySeqs
// dead letters, each read, published and removed).
const replayTimeout = 30 * time.Second

// replay answers a request on bus.DLQReplaySubject (maker serve's POST
// /v1/dlq/replay, for an admin key): the dead letters named are replayed
// with bus.ReplayDeadLetters, the checks of maker dlq replay, and the
// outcome is the reply. A body that does not read or check is answered
// with nothing (the API checks every body first: only a forger sends one)
// and logged.
func (s *controlService) replay(ctx context.Context, m *nats.Msg) {
	log := s.c.log.With("subject", m.Subject)
	var body schemas.DLQReplayBody
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		log.Warn("dead-letter replay request refused: its body does not read", "err", err)
		return
	}
	if field, err := body.Check(); err != nil {
		log.Warn("dead-letter replay request refused", "field", field, "err", err)
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayTimeout)
	defer cancel()
	res := bus.ReplayDeadLetters(rctx, s.topo.JS, s.topo.NS, body.Seqs).Result()
	log.Info("dead letters replayed", "replayed", len(res.Replayed), "refused", len(res.Refused), "failed", len(res.Failed))
	data, err := json.Marshal(res)
	if err != nil {
		log.Error("encode replay reply", "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		log.Warn("send replay reply", "err", err)
	}
}
