package taskreg

import (
	"strconv"
	"strings"
)

// CompareVersions orders task spec versions the way semantic versions
// are ordered: dotted parts compared as numbers where both are numbers
// (1.10.0 after 1.9.0), else as text; a missing part is 0; and a
// version with a pre-release suffix after '-' comes before the same
// version without one (2.0.0-rc1 before 2.0.0). Versions that are not
// semantic versions are still ordered, by the same rules.
func CompareVersions(a, b string) int {
	acore, apre, aHasPre := strings.Cut(a, "-")
	bcore, bpre, bHasPre := strings.Cut(b, "-")
	if c := compareDotted(acore, bcore); c != 0 {
		return c
	}
	switch {
	case aHasPre && !bHasPre:
		return -1
	case !aHasPre && bHasPre:
		return 1
	}
	return compareDotted(apre, bpre)
}

func compareDotted(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		x, y := "0", "0"
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		xn, xerr := strconv.ParseUint(x, 10, 64)
		yn, yerr := strconv.ParseUint(y, 10, 64)
		switch {
		case xerr == nil && yerr == nil:
			if xn != yn {
				if xn < yn {
					return -1
				}
				return 1
			}
		case xerr == nil: // numbers before text, as semver's pre-releases
			return -1
		case yerr == nil:
			return 1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	return 0
}
