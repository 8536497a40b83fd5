package simllm

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// The model reads the prompt text only, never the task's structs: that is
// what a real model gets, and it keeps the sim honest about the prompt.
var (
	disksRe = regexp.MustCompile(`Towers of Hanoi with (\d{1,3}) disks`)
	// A literal first byte lets regexp skip ahead quickly: this runs on
	// every request's system prompt.
	cycleRe = regexp.MustCompile(`0 *-> *([12]) *-> *([12]) *-> *0`)
	prevRe  = regexp.MustCompile(`Previous move: *(none|move *= *\[[^\]\n]*\])`)
	stateRe = regexp.MustCompile(`Current state: *(\[[^\n]*\])`)
)

// hanoiPrompt is what the model understood of a step prompt.
type hanoiPrompt struct {
	disks int
	dir   int // peg offset of disk 1: 1 for 0->1->2->0, 2 for 0->2->1->0
	pegs  hanoi.Pegs
	prev  *hanoi.Move
}

// readPrompt reads a Hanoi step prompt from message texts. The disk count
// and cycle come from the first message stating them; the previous move and
// state from the last message holding a current state.
func readPrompt(texts []string) (hanoiPrompt, bool) {
	var p hanoiPrompt
	haveDisks, haveCycle := false, false
	for _, t := range texts {
		if !haveDisks {
			if m := disksRe.FindStringSubmatch(t); m != nil {
				n, err := strconv.Atoi(m[1])
				if err != nil || n < 1 || n > hanoi.MaxDisks {
					return hanoiPrompt{}, false
				}
				p.disks, haveDisks = n, true
			}
		}
		if !haveCycle {
			if m := cycleRe.FindStringSubmatch(t); m != nil {
				switch m[1] + m[2] {
				case "12":
					p.dir = 1
				case "21":
					p.dir = 2
				default:
					return hanoiPrompt{}, false
				}
				haveCycle = true
			}
		}
	}
	if !haveDisks || !haveCycle {
		return hanoiPrompt{}, false
	}
	for i := len(texts) - 1; i >= 0; i-- {
		t := texts[i]
		if !strings.Contains(t, "Current state:") {
			continue
		}
		sm := lastSubmatch(stateRe, t)
		pm := lastSubmatch(prevRe, t)
		if sm == "" || pm == "" {
			return hanoiPrompt{}, false
		}
		pegs, ok := readPegs(sm, p.disks)
		if !ok {
			return hanoiPrompt{}, false
		}
		p.pegs = pegs
		if pm != "none" {
			nums, ok := readInts(pm[strings.IndexByte(pm, '['):])
			if !ok || len(nums) != 3 || nums[0] < 1 || nums[0] > p.disks ||
				nums[1] < 0 || nums[1] > 2 || nums[2] < 0 || nums[2] > 2 {
				return hanoiPrompt{}, false
			}
			p.prev = &hanoi.Move{nums[0], nums[1], nums[2]}
		}
		return p, true
	}
	return hanoiPrompt{}, false
}

func lastSubmatch(re *regexp.Regexp, s string) string {
	all := re.FindAllStringSubmatch(s, -1)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1][1]
}

// readPegs reads "[[3, 2], [], [1]]": three lists holding each of 1..n once.
func readPegs(s string, n int) (hanoi.Pegs, bool) {
	var p hanoi.Pegs
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return p, false
	}
	rest := s[1 : len(s)-1]
	seen := make([]bool, n+1)
	count := 0
	for i := range 3 {
		rest = strings.TrimLeft(rest, " ")
		if i > 0 {
			if !strings.HasPrefix(rest, ",") {
				return p, false
			}
			rest = strings.TrimLeft(rest[1:], " ")
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return p, false
		}
		nums, ok := readInts(rest[:end+1])
		if !ok {
			return p, false
		}
		for _, d := range nums {
			if d < 1 || d > n || seen[d] {
				return p, false
			}
			seen[d] = true
			count++
		}
		if nums == nil {
			nums = []int{}
		}
		p[i] = nums
		rest = rest[end+1:]
	}
	if strings.TrimSpace(rest) != "" || count != n {
		return p, false
	}
	return p, true
}

// readInts reads "[1, 2, 3]" (or "[]") of small non-negative integers.
func readInts(s string) ([]int, bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	body := strings.TrimSpace(s[1 : len(s)-1])
	if body == "" {
		return nil, true
	}
	var out []int
	for f := range strings.SplitSeq(body, ",") {
		f = strings.TrimSpace(f)
		if f == "" || len(f) > 3 {
			return nil, false
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// solve returns the strategy's move and the state after it, following the
// cycle the prompt states.
func (p *hanoiPrompt) solve() (hanoi.Move, hanoi.Pegs, error) {
	// StrategyMove takes the direction from the parity of n; hand it a disk
	// count with the parity of the prompt's cycle.
	n := p.disks
	if hanoi.Direction(n) != p.dir {
		n++
	}
	m, err := hanoi.StrategyMove(p.pegs, p.prev, n)
	if err != nil {
		return hanoi.Move{}, hanoi.Pegs{}, err
	}
	next, err := hanoi.Apply(p.pegs, m)
	if err != nil {
		return hanoi.Move{}, hanoi.Pegs{}, err
	}
	return m, next, nil
}

// cycle is the prompt's cycle in the prompt's notation.
func (p *hanoiPrompt) cycle() string {
	if p.dir == 1 {
		return "0 -> 1 -> 2 -> 0"
	}
	return "0 -> 2 -> 1 -> 0"
}
