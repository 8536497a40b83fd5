// Package app marks the top layer of internal/: the packages under it
// assemble the roles (coordinator, voter, judge) into something that runs
// in one process, a whole fleet (fleet), the servers it needs when none is
// given (devserver), and the test kits that start roles (fleettest,
// judgetest). They are the only packages under internal/ that may import a
// role; every other one sits below the roles and is imported by them, so an
// import back up would make a cycle waiting to happen. layers_test.go holds
// that rule.
package app
