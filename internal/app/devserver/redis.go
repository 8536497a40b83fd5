package devserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProcess is a redis-server this process started and owns.
type RedisProcess struct {
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	dir    string
}

// StartRedis starts redis-server (from PATH) on a free loopback port with
// persistence off, for benchmarks and tests. Close stops it.
func StartRedis(ctx context.Context) (*RedisProcess, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("devserver: redis-server not installed: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "maker-redis-")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(path,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("devserver: start redis-server: %w", err)
		}
		p := &RedisProcess{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, exited: make(chan struct{}), dir: dir}
		go func() { _ = cmd.Wait(); close(p.exited) }() // owned: ends with the process
		if lastErr = p.waitReady(ctx, 5*time.Second); lastErr == nil {
			return p, nil
		}
		p.Close() // most likely the port was taken meanwhile: try another
	}
	return nil, fmt.Errorf("devserver: redis-server did not start: %w", lastErr)
}

// Close kills the server and removes its directory.
func (p *RedisProcess) Close() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = os.RemoveAll(p.dir)
}

func (p *RedisProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server on %s exited: %w", p.Addr, err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: %w", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
