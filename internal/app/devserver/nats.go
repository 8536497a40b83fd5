package devserver

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSOptions configure an in-process nats-server.
type NATSOptions struct {
	// StoreDir holds JetStream's files (required).
	StoreDir string
	// Host and Port to listen on; defaults 127.0.0.1 and a random port.
	Host string
	Port int
	// Debug turns on the server's log.
	Debug bool
}

// RunNATS starts a real nats-server inside this process with JetStream
// on. The caller owns it: Shutdown() then WaitForShutdown().
func RunNATS(o NATSOptions) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("devserver: nats-server needs a store dir")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "maker-embedded",
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      !o.Debug,
		MaxPayload: 8 << 20,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("devserver: nats-server: %w", err)
	}
	if o.Debug {
		ns.ConfigureLogger()
	}
	ns.Start() // returns at once; the server runs its own goroutines until Shutdown
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("devserver: nats-server not ready after 10s")
	}
	return ns, nil
}
