package testkit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of redis-server processes on loopback
// ports, made with redis-cli --cluster create.
type RedisCluster struct {
	Nodes []*RedisNode
	tb    testing.TB
}

// StartRedisCluster starts masters*(1+replicas) nodes with
// --cluster-enabled yes and a one-second node timeout (a lost master fails
// over within a few seconds), joins them with redis-cli --cluster create,
// and waits until every node says cluster_state:ok and every replica's
// link to its master is up. users are ACL users on every node, as for
// StartRedisTLS; the default user keeps every right without a password.
func StartRedisCluster(tb testing.TB, masters, replicas int, users ...string) *RedisCluster {
	tb.Helper()
	RequireRedisTools(tb, "redis-cli")
	c := &RedisCluster{tb: tb}
	n := masters * (1 + replicas)
	args := []string{"--cluster", "create"}
	for range n {
		node := startRedisNode(tb, redisNodeConfig{args: func(port int, dir string) []string {
			return append(append(plainArgs(port, dir),
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "1000",
				// A replica takes over however long its master was away.
				"--cluster-replica-validity-factor", "0"), userArgs(users)...)
		}})
		c.Nodes = append(c.Nodes, node)
		args = append(args, node.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	Eventually(tb, 30*time.Second, func() bool { return c.healthy(ctx, nil) == nil },
		"redis cluster not healthy: %v", lazyErr(func() error { return c.healthy(ctx, nil) }))
	return c
}

// lazyErr formats as fn's error when printed.
type lazyErr func() error

func (f lazyErr) String() string {
	if err := f(); err != nil {
		return err.Error()
	}
	return "<nil>"
}

// URL is a redis+cluster:// URL naming every node as a seed.
func (c *RedisCluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

func (c *RedisCluster) alive() []*RedisNode {
	var out []*RedisNode
	for _, n := range c.Nodes {
		select {
		case <-n.exited:
		default:
			out = append(out, n)
		}
	}
	return out
}

func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second})
}

// healthy says why the live nodes are not yet a working cluster: a node
// not at cluster_state:ok, a replica whose link is down, a slot served by
// gone (a node taken away) on some node's view.
func (c *RedisCluster) healthy(ctx context.Context, gone *RedisNode) error {
	for _, n := range c.alive() {
		rc := nodeClient(n.Addr)
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state not ok", n.Addr)
			}
			repl, err := rc.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica link down", n.Addr)
			}
			shards, err := rc.ClusterShards(ctx).Result()
			if err != nil {
				return err
			}
			covered := 0
			for _, sh := range shards {
				if len(sh.Slots) == 0 {
					continue
				}
				master := onlineMaster(sh)
				if master == "" || (gone != nil && master == gone.Addr) {
					return fmt.Errorf("%s: slots from %d served by %q", n.Addr, sh.Slots[0].Start, master)
				}
				for _, r := range sh.Slots {
					covered += int(r.End - r.Start + 1)
				}
			}
			if covered != 16384 {
				return fmt.Errorf("%s: %d slots covered", n.Addr, covered)
			}
			return nil
		}()
		_ = rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// onlineMaster is the address of a shard's master that is up, "" if none.
func onlineMaster(sh redis.ClusterShard) string {
	for _, n := range sh.Nodes {
		if n.Role == "master" && n.Health == "online" {
			return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
		}
	}
	return ""
}

// MasterOf returns the node that serves key now.
func (c *RedisCluster) MasterOf(key string) *RedisNode {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc := nodeClient(c.alive()[0].Addr)
	defer rc.Close()
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		c.tb.Fatal(err)
	}
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		c.tb.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range c.Nodes {
					if n.Addr == onlineMaster(sh) {
						return n
					}
				}
			}
		}
	}
	c.tb.Fatalf("no node serves slot %d", slot)
	return nil
}

// WaitFailover waits until the cluster works again without gone (killed):
// its slots served by a promoted replica, on every live node's view.
func (c *RedisCluster) WaitFailover(gone *RedisNode, timeout time.Duration) {
	c.tb.Helper()
	ctx := context.Background()
	Eventually(c.tb, timeout, func() bool { return c.healthy(ctx, gone) == nil },
		"no failover from %s: %v", gone.Addr, lazyErr(func() error { return c.healthy(ctx, gone) }))
}

// RedisSentinel is a master, a replica and sentinels watching them under
// the name MasterName.
type RedisSentinel struct {
	Master, Replica *RedisNode
	Sentinels       []*RedisNode
	MasterName      string
	tb              testing.TB
}

// StartRedisSentinel starts a master, a replica of it and n sentinels with
// the given quorum, a master being down after 500ms; it waits until every
// sentinel knows the replica and the other sentinels. users are ACL users
// on the master and the replica, as for StartRedisTLS.
func StartRedisSentinel(tb testing.TB, n, quorum int, users ...string) *RedisSentinel {
	tb.Helper()
	RequireRedisTools(tb)
	s := &RedisSentinel{MasterName: "mymaster", tb: tb}
	s.Master = startRedisNode(tb, redisNodeConfig{args: func(port int, dir string) []string {
		return append(plainArgs(port, dir), userArgs(users)...)
	}})
	s.Replica = startRedisNode(tb, redisNodeConfig{args: func(port int, dir string) []string {
		return append(append(plainArgs(port, dir), "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port)), userArgs(users)...)
	}})
	for range n {
		s.Sentinels = append(s.Sentinels, startRedisNode(tb, redisNodeConfig{args: func(port int, dir string) []string {
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
				"sentinel monitor %s 127.0.0.1 %d %d\n"+
				"sentinel down-after-milliseconds %s 500\n"+
				"sentinel failover-timeout %s 5000\n",
				port, dir, filepath.Join(dir, "sentinel.log"), s.MasterName, s.Master.Port, quorum, s.MasterName, s.MasterName)
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				tb.Fatal(err)
			}
			return []string{conf, "--sentinel"}
		}}))
	}
	Eventually(tb, 30*time.Second, func() bool { return s.ready() == nil },
		"sentinels not ready: %v", lazyErr(s.ready))
	return s
}

// URL is a redis+sentinel:// URL naming every sentinel.
func (s *RedisSentinel) URL() string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + s.MasterName + "/0"
}

func (s *RedisSentinel) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc := nodeClient(s.Replica.Addr)
	repl, err := rc.Info(ctx, "replication").Result()
	_ = rc.Close()
	if err != nil {
		return err
	}
	if !strings.Contains(repl, "master_link_status:up") {
		return fmt.Errorf("replica link down")
	}
	for _, n := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		err := func() error {
			reps, err := sc.Replicas(ctx, s.MasterName).Result()
			if err != nil {
				return err
			}
			if len(reps) != 1 || strings.Contains(reps[0]["flags"], "down") {
				return fmt.Errorf("sentinel %s: replicas %v", n.Addr, reps)
			}
			others, err := sc.Sentinels(ctx, s.MasterName).Result()
			if err != nil {
				return err
			}
			if len(others) != len(s.Sentinels)-1 {
				return fmt.Errorf("sentinel %s knows %d other sentinels", n.Addr, len(others))
			}
			return nil
		}()
		_ = sc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// MasterAddr asks the live sentinels where the master is; "" if none
// answers.
func (s *RedisSentinel) MasterAddr() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range s.Sentinels {
		select {
		case <-n.exited:
			continue
		default:
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		_ = sc.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1]
		}
	}
	return ""
}

// WaitFailover waits until every sentinel names the replica as the master
// and the replica says it is one.
func (s *RedisSentinel) WaitFailover(timeout time.Duration) {
	s.tb.Helper()
	promoted := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, n := range s.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
			_ = sc.Close()
			if err != nil {
				return err
			}
			if got := addr[0] + ":" + addr[1]; got != s.Replica.Addr {
				return fmt.Errorf("sentinel %s names %s", n.Addr, got)
			}
		}
		rc := nodeClient(s.Replica.Addr)
		defer rc.Close()
		repl, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(repl, "role:master") {
			return fmt.Errorf("replica %s not a master yet", s.Replica.Addr)
		}
		return nil
	}
	Eventually(s.tb, timeout, func() bool { return promoted() == nil }, "no failover: %v", lazyErr(promoted))
}

// LogTail returns the last lines of a node's log file, for failure
// messages.
func (n *RedisNode) LogTail(name string, lines int) string {
	f, err := os.Open(filepath.Join(n.Dir, name))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
