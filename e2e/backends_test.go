package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// The backend tests run the same seeded job against Redis over TLS with
// an ACL user, a Redis Cluster, a Sentinel set-up and a nats-server
// cluster, killing a master (or the coordinator's NATS node) mid-job; the
// job ends with the golden trace each time. They need redis-server and
// redis-cli, and fail rather than skip under MAKER_REQUIRE_REDIS=1 (CI).

// storeACL are the rights of the coordinator's Redis user (after "user
// NAME on >PASSWORD"), for the default key prefix "maker": its keys only,
// no channels, and the commands the store, the budgets and quotas
// (internal/quota) and go-redis's connection set-up (also for Cluster)
// send. docs/security.md shows the same line.
const storeACL = "resetkeys ~maker:* resetchannels -@all " +
	"+hello +auth +ping +client|setname +select " +
	"+command +cluster|slots +cluster|shards " +
	"+evalsha +eval +script|load +hget +hmget +hset +hsetnx +hgetall +hincrby +hkeys +hdel +pexpire +pttl +time " +
	"+zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore " +
	"+del +unlink +incr +expire +multi +exec"

// TestRedisTLSWithACLUser: the fleet's store on a redis-server that takes
// only TLS, as an ACL user with storeACL: the job runs to its golden
// trace. A user without those rights, a wrong password, a plain
// connection and an unknown CA each get a clear error, with no password
// in it.
func TestRedisTLSWithACLUser(t *testing.T) {
	t.Parallel()
	r := testkit.StartRedisTLS(t,
		"maker on >maker-pw "+storeACL,
		"reader on >reader-pw ~maker:* resetchannels -@all +hello +auth +ping +get")
	ca := url.QueryEscape(r.Files.CA)
	env := newBackendEnv(t, fleettest.Backends{
		RedisURL: "rediss://maker:maker-pw@" + r.Addr + "/0?tls_ca=" + ca,
	})
	runBackendJob(t, env, nil)

	for _, tc := range []struct {
		name, url, want string
		load            bool // the error comes with the store's first command, not PING
	}{
		{"user without rights", "rediss://reader:reader-pw@" + r.Addr + "/0?tls_ca=" + ca, "NOPERM", true},
		{"wrong password", "rediss://maker:not-the-pw@" + r.Addr + "/0?tls_ca=" + ca, "WRONGPASS", false},
		{"unknown CA", "rediss://maker:maker-pw@" + r.Addr + "/0", "certificate signed by unknown authority", false},
		{"plain connection to the TLS port", "redis://maker:maker-pw@" + r.Addr + "/0?dial_timeout=1s&read_timeout=1s", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, o, err := store.NewRedisClient(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = rdb.Ping(ctx).Err()
			if tc.load {
				if err != nil {
					t.Fatalf("ping: %v", err)
				}
				st, serr := store.New(rdb, store.Config{})
				if serr != nil {
					t.Fatal(serr)
				}
				err = st.Load(ctx)
			}
			if err == nil {
				t.Fatalf("no error, want one saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q, want one saying %q", err, tc.want)
			}
			msg := fmt.Sprintf("redis at %s: %v", o.Redacted, err)
			if strings.Contains(msg, "-pw") {
				t.Errorf("a password is shown: %s", msg)
			}
			t.Log(msg)
		})
	}
}

// TestRedisClusterMasterKilled: the store on a Redis Cluster of 3 masters
// and 3 replicas, reached through the redis+cluster:// seed list as the
// ACL user with storeACL. The
// master holding the job's slot is SIGKILLed mid-job; its replica takes
// over and the job finishes with the golden trace.
func TestRedisClusterMasterKilled(t *testing.T) {
	t.Parallel()
	rc := testkit.StartRedisCluster(t, 3, 1, "maker on >maker-pw "+storeACL)
	env := newBackendEnv(t, fleettest.Backends{RedisURL: strings.Replace(rc.URL(), "://", "://maker:maker-pw@", 1)})
	runBackendJob(t, env, func(spec schemas.JobSpec) {
		// Every key of a job shares its hash tag, so one node holds them.
		master := rc.MasterOf(store.DefaultKeyPrefix + ":{" + spec.Tenant + "/" + spec.JobID + "}:step")
		master.Kill()
		rc.WaitFailover(master, 30*time.Second)
	})
}

// TestRedisSentinelMasterKilled: the store on a master and a replica
// watched by 3 sentinels (quorum 2), reached through a
// redis+sentinel:// URL as the ACL user with storeACL. The master is SIGKILLed mid-job; the sentinels
// promote the replica and the job finishes with the golden trace.
func TestRedisSentinelMasterKilled(t *testing.T) {
	t.Parallel()
	rs := testkit.StartRedisSentinel(t, 3, 2, "maker on >maker-pw "+storeACL)
	env := newBackendEnv(t, fleettest.Backends{RedisURL: strings.Replace(rs.URL(), "://", "://maker:maker-pw@", 1)})
	runBackendJob(t, env, func(schemas.JobSpec) {
		rs.Master.Kill()
		rs.WaitFailover(30 * time.Second)
	})
}

// TestNATSClusterOwnerNodeKilled: the fleet on a 3-node nats-server
// cluster with R3 streams and buckets. The node the job's coordinator is
// connected to is shut down mid-job; the clients reconnect to the others,
// nothing is lost, and the job finishes with the golden trace.
func TestNATSClusterOwnerNodeKilled(t *testing.T) {
	t.Parallel()
	nc := testkit.StartNATSCluster(t, 3)
	env := newBackendEnv(t, fleettest.Backends{
		NATS: &testkit.NATS{URL: nc.URL()},
		Bus:  &topology.Config{Replicas: 3},
	})
	runBackendJob(t, env, func(schemas.JobSpec) {
		i := nc.ServerOf("coordinator-test")
		if i < 0 {
			t.Fatal("the coordinator is connected to no server")
		}
		nc.Kill(i)
	})
}

// TestCoordinatorRedisURLRefused: maker coordinator refuses a bad --redis
// (an unknown scheme, a bad seed list, a Sentinel URL without a master)
// with a usage error that shows the URL redacted, never its password.
func TestCoordinatorRedisURLRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"ftp://maker:Secret-pw-1@h:6379/0", `scheme "ftp"`},
		{"redis+cluster://maker:Secret-pw-1@h1:7000,,h3:7002", "empty host"},
		{"redis+sentinel://maker:Secret-pw-1@s1:26379,s2:26379", "no master name"},
		{"redis://maker:Secret-pw-1@h:6379/0?addr=h2:7001&db=3", "only database 0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, makerBin, "coordinator", "--redis", tc.url, "--nats", "nats://127.0.0.1:1").CombinedOutput()
		cancel()
		if err == nil {
			t.Fatalf("%s: accepted", tc.want)
		}
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "bad redis URL") {
			t.Errorf("output %q, want it to say %q", out, tc.want)
		}
		if strings.Contains(string(out), "Secret-pw-1") {
			t.Errorf("the password is shown: %s", out)
		}
	}
}
