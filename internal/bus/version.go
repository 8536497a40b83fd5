package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// MinServerVersion is the oldest nats-server the fleet runs on. The
// journal fences a checkpoint (subject ….c) on the last sequence of the
// job's entries subject (….d): the Nats-Expected-Last-Subject-Sequence-
// Subject header, added in nats-server 2.11.0 (nats-server PR #5281; the
// nats.go option WithExpectLastSequenceForSubject). An older server
// ignores the header and checks the checkpoint subject's own last
// sequence instead, which never matches: every checkpoint is refused as
// fenced and the owner gives the job up, over and over.
const MinServerVersion = "2.11.0"

// ErrServerVersion: the NATS server is older than MinServerVersion.
var ErrServerVersion = errors.New("bus: nats-server too old")

// CheckServerVersion returns ErrServerVersion, naming the minimum, when
// version (as a server announces it: "2.10.22", "v2.11.0-RC.1") is older
// than MinServerVersion or cannot be read. A pre-release of the minimum
// counts as the minimum.
func CheckServerVersion(version string) error {
	have, ok := parseVersion(version)
	want, _ := parseVersion(MinServerVersion)
	if !ok {
		return fmt.Errorf("%w: the server reports version %q, which is not a version; makerfleet needs nats-server %s or later",
			ErrServerVersion, version, MinServerVersion)
	}
	for i := range have {
		if have[i] != want[i] {
			if have[i] < want[i] {
				return fmt.Errorf("%w: the server is nats-server %s; makerfleet needs %s or later (the journal's fencing uses the Nats-Expected-Last-Subject-Sequence-Subject header, new in 2.11.0): upgrade the server",
					ErrServerVersion, version, MinServerVersion)
			}
			break
		}
	}
	return nil
}

// parseVersion reads MAJOR.MINOR.PATCH, with an optional leading "v" and
// anything after a '-' or '+' ignored.
func parseVersion(v string) ([3]int, bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	var out [3]int
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// CheckServer refuses a server older than MinServerVersion, at start
// (topology.Ensure, EnsureJudge, Open and OpenJudge). A client that is not connected yet (a role started
// before its server, still retrying) is not refused here: its first
// request fails as Transient and is retried.
func CheckServer(js jetstream.JetStream) error {
	nc := js.Conn()
	if nc == nil || !nc.IsConnected() {
		return nil
	}
	return CheckServerVersion(nc.ConnectedServerVersion())
}
