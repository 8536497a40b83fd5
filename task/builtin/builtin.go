// Package builtin holds the registry of tasks that ship with makerfleet.
package builtin

import (
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// Registry returns a registry with every built-in task: hanoi.
func Registry() *task.Registry {
	return task.NewRegistry(hanoi.Task{})
}
