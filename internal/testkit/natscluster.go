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
// JetStream has a meta leader every server follows. The route ports are
// picked free ahead of the servers, so another process may take one
// meanwhile: a cluster whose server cannot listen is shut down and started
// again on other ports (at most 3 times).
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	tb.Helper()
	var c *NATSCluster
	var err error
	for range 3 {
		if c, err = startNATSCluster(tb, n); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatal(err)
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

// startNATSCluster makes one attempt: on an error, the servers it started
// are shut down.
func startNATSCluster(tb testing.TB, n int) (*NATSCluster, error) {
	tb.Helper()
	ports := make([]int, n)
	routes := make([]*url.URL, n)
	for i := range n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	c := &NATSCluster{tb: tb}
	stop := func(s *server.Server) { s.Shutdown(); s.WaitForShutdown() }
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
		if err == nil {
			s.Start()
			if !s.ReadyForConnections(10 * time.Second) {
				stop(s)
				err = fmt.Errorf("nats-server %d not ready (its route port %d may have been taken)", i+1, ports[i])
			}
		}
		if err != nil {
			for _, started := range c.Servers {
				stop(started)
			}
			return nil, fmt.Errorf("nats-server %d: %w", i+1, err)
		}
		tb.Cleanup(func() { stop(s) })
		c.Servers = append(c.Servers, s)
	}
	return c, nil
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
