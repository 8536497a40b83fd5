package devserver

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// RunMiniredis starts miniredis, a Redis-compatible server that runs our
// Lua, on a random loopback port. Single-process runs use it when no Redis
// URL is given. The caller owns it: Close().
func RunMiniredis() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("devserver: miniredis: %w", err)
	}
	return m, nil
}
