package step

import (
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// batched is one result message holding the answers to reqs (members of
// one request: SampleResult.Also), answers[i] for reqs[i]; edit, when not
// nil, changes each answer before it joins the message.
func (h *harness) batched(reqs []*schemas.SampleRequest, answers []string, edit func(i int, r *schemas.SampleResult)) []byte {
	h.t.Helper()
	var first schemas.SampleResult
	for i, req := range reqs {
		var res schemas.SampleResult
		if err := schemas.Decode(h.result(req, answers[i]), &res); err != nil {
			h.t.Fatal(err)
		}
		if edit != nil {
			edit(i, &res)
		}
		if i == 0 {
			first = res
			continue
		}
		first.Also = append(first.Also, res.Member())
	}
	data, err := schemas.Encode(&first)
	if err != nil {
		h.t.Fatal(err)
	}
	return data
}

// waveOf starts a k=k job and returns its harness and first wave's
// requests (taken off the queue when take is set).
func waveOf(t *testing.T, k int, take bool) (*harness, []*schemas.SampleRequest) {
	h := newHarness(t, spec(k, 100), 3, byIndex(rightAns))
	h.start()
	wave := slices.Clone(h.queue[:k])
	if take {
		h.queue = h.queue[k:]
	}
	return h, wave
}

// onResults hands the machine msgs and returns the settles it made.
func (h *harness) onResults(msgs ...[]byte) []string {
	n := len(h.acts)
	in := make([]Incoming, len(msgs))
	for i, data := range msgs {
		in[i] = Incoming{Data: data}
	}
	h.do(nil, h.m.OnResults(h.now, in))
	return settles(h.acts[n:])
}

// settles lists the settle actions of acts.
func settles(acts []string) []string {
	var out []string
	for _, a := range acts {
		if strings.HasPrefix(a, "ack ") || strings.HasPrefix(a, "term ") || strings.HasPrefix(a, "nak ") {
			out = append(out, a)
		}
	}
	return out
}

// TestMachineBatchedResults: a message holding a wave's answers is read
// answer by answer, as if each came alone, and settled once: acked when
// any answer counts or is accounted, terminated only when every answer
// is forged; an answer Redis does not take is held and recorded again,
// never nak'ed, so the message's other answers do not come back to be
// counted (and billed) twice.
func TestMachineBatchedResults(t *testing.T) {
	both := []string{right(0), right(0)}
	t.Run("two votes in one message", func(t *testing.T) {
		h, wave := waveOf(t, 2, true)
		if got := h.onResults(h.batched(wave, both, nil)); !slices.Equal(got, []string{"ack #0"}) {
			t.Errorf("settled %q, want the message acked once", got)
		}
		if h.m.Step != 1 {
			t.Errorf("step %d: two votes alike at k=2 decide step 0", h.m.Step)
		}
		if got := h.m.Acct.PromptTokens; got != 200 {
			t.Errorf("prompt tokens %d, want 200 (100 an answer)", got)
		}
		if len(h.m.Verified[0]) != 2 {
			t.Errorf("verified %q: both answers' reservations are released", h.m.Verified[0])
		}
	})
	t.Run("one answer forged", func(t *testing.T) {
		h, wave := waveOf(t, 2, false)
		data := h.batched(wave, both, func(i int, r *schemas.SampleResult) {
			if i == 1 {
				r.Token = wave[0].Token // another sample's token: a copy of an honest answer
			}
		})
		if got := h.onResults(data); !slices.Equal(got, []string{"ack #0"}) {
			t.Errorf("settled %q, want the message acked (its honest answer counted)", got)
		}
		if f := h.m.Acct.Figures; f.ForgedResults != 1 || f.PromptTokens != 100 || h.m.Step != 0 || len(h.m.seen) != 1 {
			t.Errorf("forged %d, tokens %d, step %d, seen %v: want the forged answer counted as such and nothing of it", f.ForgedResults, f.PromptTokens, h.m.Step, h.m.seen)
		}
		if !slices.Equal(h.m.Verified[0], []string{wave[0].SampleID}) {
			t.Errorf("verified %q: only the honest answer's reservation is released", h.m.Verified[0])
		}
	})
	t.Run("every answer forged", func(t *testing.T) {
		h, wave := waveOf(t, 2, false)
		data := h.batched(wave, both, func(_ int, r *schemas.SampleResult) { r.Token = strings.Repeat("A", schemas.SampleTokenLen) })
		if got := h.onResults(data); !slices.Equal(got, []string{"term #0"}) {
			t.Errorf("settled %q, want the message terminated", got)
		}
		if h.m.Acct.ForgedResults != 2 {
			t.Errorf("forged %d, want 2", h.m.Acct.ForgedResults)
		}
	})
	t.Run("record failed: held, not nak'ed", func(t *testing.T) {
		h, wave := waveOf(t, 2, true)
		acts := h.m.OnResults(h.now, []Incoming{{Data: h.batched(wave, both, nil)}})
		if describe(acts) != "record 2" {
			t.Fatalf("actions %s, want both answers recorded together", describe(acts))
		}
		acts, err := h.m.RecordFailed(h.now, errFake)
		if err != nil || describe(acts) != "ack #0" {
			t.Fatalf("actions %s, err %v: want the message acked, its answers held", describe(acts), err)
		}
		if len(h.m.Ahead.Feed) != 2 || h.m.Acct.PromptTokens != 200 {
			t.Fatalf("feed %d, tokens %d: want both answers held, accounted once", len(h.m.Ahead.Feed), h.m.Acct.PromptTokens)
		}
		h.do(nil, h.m.OnFeed(h.now))
		if h.m.Step != 1 || h.m.Acct.PromptTokens != 200 || h.m.Acct.DuplicateResults != 0 {
			t.Errorf("step %d, tokens %d, duplicates %d: want step 0 decided from the held answers, each counted once",
				h.m.Step, h.m.Acct.PromptTokens, h.m.Acct.DuplicateResults)
		}
	})
	t.Run("held answers recorded with the next message", func(t *testing.T) {
		h, wave := waveOf(t, 3, true)
		h.m.OnResults(h.now, []Incoming{{Data: h.batched(wave[:2], both, nil)}})
		if _, err := h.m.RecordFailed(h.now, errFake); err != nil {
			t.Fatal(err)
		}
		third := h.result(wave[2], right(0))
		if acts := h.m.OnResults(h.now, []Incoming{{Data: third}}); describe(acts) != "record 1" {
			t.Fatalf("actions %s before the held answers are due: want the new answer alone", describe(acts))
		}
		h.m.Batch = nil // that record never ran: start over with the held answers due
		h.now = h.now.Add(NakDelay)
		if !h.m.FeedDue(h.now) {
			t.Fatal("the held answers are not due after NakDelay")
		}
		acts := h.m.OnResults(h.now, []Incoming{{Data: third}})
		if describe(acts) != "record 3" {
			t.Fatalf("actions %s: want the two held answers and the new one in one record", describe(acts))
		}
		h.do(nil, acts)
		if h.m.Step != 1 || len(h.m.Ahead.Feed) != 0 || h.m.Acct.DuplicateResults != 0 || h.m.Acct.PromptTokens != 300 {
			t.Errorf("step %d, feed %d, duplicates %d, tokens %d: want step 0 decided by the three, each counted once",
				h.m.Step, len(h.m.Ahead.Feed), h.m.Acct.DuplicateResults, h.m.Acct.PromptTokens)
		}
	})
	t.Run("a message beside a batch", func(t *testing.T) {
		h, wave := waveOf(t, 3, true)
		got := h.onResults(h.batched(wave[:2], []string{right(0), wrongAns(0)}, nil), h.result(wave[2], right(0)))
		if !slices.Equal(got, []string{"ack #0", "ack #1"}) {
			t.Errorf("settled %q, want each message acked once, in order", got)
		}
		if got := h.m.answered; got != 3 {
			t.Errorf("answered %d, want 3", got)
		}
	})
	t.Run("an answer counted already", func(t *testing.T) {
		h, wave := waveOf(t, 3, false)
		h.deliver(1) // index 0 alone
		if got := h.onResults(h.batched(wave[:2], both, nil)); !slices.Equal(got, []string{"ack #0"}) {
			t.Errorf("settled %q", got)
		}
		if h.m.Acct.DuplicateResults != 1 {
			t.Errorf("duplicates %d, want 1: index 0 came twice", h.m.Acct.DuplicateResults)
		}
	})
}
