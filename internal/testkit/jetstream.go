package testkit

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect returns a connection to the server at url and a JetStream
// client on it; the connection is closed at cleanup.
func Connect(tb testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}
