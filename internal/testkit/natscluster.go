package testkit

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a cluster of in-process nats-servers with JetStream,
// routed to each other, for R3 streams.
type NATSCluster struct {
	Servers []*server.Server
	tb      testing.TB
}

// StartNATSCluster starts n nats-servers (random client ports, each its
// own store dir) in one cluster and waits until every route is up and
// JetStream has a meta leader every server follows.
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	ports := make([]int, n)
	routes := make([]*url.URL, n)
	for i := range n {
		p, err := FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		ports[i] = p
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	c := &NATSCluster{tb: tb}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   tb.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: 8 << 20,
			Cluster: server.ClusterOpts{
				Name: "maker-test", Host: "127.0.0.1", Port: ports[i],
			},
			Routes: routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			tb.Fatalf("nats-server %d: %v", i+1, err)
		}
		s.Start()
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			tb.Fatalf("nats-server %d not ready", i+1)
		}
		c.Servers = append(c.Servers, s)
	}
	Eventually(tb, 30*time.Second, func() bool {
		leader := false
		for _, s := range c.Servers {
			if s.NumRoutes() < n-1 || !s.JetStreamIsCurrent() {
				return false
			}
			leader = leader || s.JetStreamIsLeader()
		}
		return leader
	}, "nats cluster: routes or JetStream meta leader not up")
	return c
}

// URL lists every server's client URL, for a client that may reconnect
// to any of them.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// ServerOf returns the index of the server a client connection named name
// is connected to, -1 if none.
func (c *NATSCluster) ServerOf(name string) int {
	for i, s := range c.Servers {
		if !s.Running() {
			continue
		}
		cz, err := s.Connz(&server.ConnzOptions{})
		if err != nil {
			continue
		}
		for _, ci := range cz.Conns {
			if ci.Name == name {
				return i
			}
		}
	}
	return -1
}

// Kill shuts server i down at once (clients see their connection drop,
// as with a SIGKILL of a nats-server process) and waits until it is gone.
func (c *NATSCluster) Kill(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}
