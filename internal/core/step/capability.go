package step

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"hash"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// Sample capabilities. Each sample request carries a token a voter cannot
// make for another sample: the HMAC-SHA256 of its sample id under the
// fleet's key (internal/store SampleKey: in Redis, which only coordinators
// reach), cut to 128 bits, in base64url. A voter echoes it in its result
// and publishes the result under a message id that holds it
// (schemas.ResultMsgID), so a voter that pulled one request can neither
// vote for the wave's other indexes, attempts, branches or jobs, nor have
// the results stream drop their honest answers as duplicates of its
// forgeries. Every result is checked first, before anything else reads
// it; one whose token is not its sample's is dropped, counted
// (Figures.ForgedResults, maker_forged_results_total) and logged, and its
// sample waits for its honest answer.

// capabilityContext separates this use of the fleet's key from any other.
const capabilityContext = "makerfleet sample capability v1\x00"

// capabilities makes and checks one job's sample tokens. It keeps one
// hash state, so it belongs to one goroutine (the job's machine).
type capabilities struct {
	mac hash.Hash
	sum [sha256.Size]byte
	tok [schemas.SampleTokenLen]byte
	buf []byte  // what is hashed: the context and the sample id
	log logGate // of forged results
}

// tokenBytes is what a token keeps of the HMAC: 128 bits.
const tokenBytes = 16

// newCapabilities makes tokens under key. Without one (a machine of the
// tests) it makes a key of its own at random: its tokens still hold, as
// only the run that published a request reads its answers (each lease
// generation has its own results subject), but the fleet's shared key
// keeps that true whichever coordinator reads them.
func newCapabilities(key []byte) *capabilities {
	if len(key) == 0 {
		key = make([]byte, 32) // store.SampleKeyBytes, the fleet key's size
		_, _ = rand.Read(key)  // never fails (crypto/rand)
	}
	return &capabilities{mac: hmac.New(sha256.New, key)}
}

// compute writes the token of sampleID into c.tok.
func (c *capabilities) compute(sampleID string) {
	c.mac.Reset()
	c.buf = append(append(c.buf[:0], capabilityContext...), sampleID...)
	_, _ = c.mac.Write(c.buf)
	sum := c.mac.Sum(c.sum[:0])
	base64.RawURLEncoding.Encode(c.tok[:], sum[:tokenBytes])
}

// token is the capability of the sample sampleID.
func (c *capabilities) token(sampleID string) string {
	c.compute(sampleID)
	return string(c.tok[:])
}

// verify reports whether token is the capability of sampleID, in time
// independent of where they differ.
func (c *capabilities) verify(sampleID, token string) bool {
	if len(token) != schemas.SampleTokenLen {
		return false
	}
	c.compute(sampleID)
	return subtle.ConstantTimeCompare(c.tok[:], []byte(token)) == 1
}

// untrustedLogEvery spaces the log lines about forged and overclaiming
// results of a job: a flood is counted in full, logged once a second.
const untrustedLogEvery = time.Second

// logGate lets a log line through at most once per untrustedLogEvery.
type logGate struct{ next time.Time }

func (g *logGate) open(now time.Time) bool {
	if now.Before(g.next) {
		return false
	}
	g.next = now.Add(untrustedLogEvery)
	return true
}

// forged drops res, whose token is not its sample's: counted, logged at
// most once a second, its tokens never counted.
func (m *Machine) forged(now time.Time, res *schemas.SampleResult, subject string) {
	m.Acct.ForgedResults++
	if m.caps.log.open(now) {
		m.log.Warn("dropping a forged result: its token is not the one issued for its sample (a voter answering a sample it was never handed?)",
			"voter", truncate(res.VoterID, 64), "sample", res.SampleID, "subject", subject, "forged_so_far", m.Acct.ForgedResults)
	}
}

// truncate cuts s to n bytes, for a log line quoting a hostile field.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
