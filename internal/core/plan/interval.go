package plan

import (
	"fmt"
	"math"
)

// Interval is a confidence interval for a proportion.
type Interval struct{ Low, High float64 }

// ClopperPearson is the exact (Clopper–Pearson) central interval for a
// binomial proportion with x successes in n trials at confidence level
// conf in (0, 1): the Beta(x, n−x+1) quantile at (1−conf)/2 and the
// Beta(x+1, n−x) quantile at (1+conf)/2, with 0 and 1 at the ends. Its
// coverage is at least conf for every true proportion (it is
// conservative), which matters here: p near 1 is where the normal
// approximation fails. n = 0 gives [0, 1].
func ClopperPearson(x, n int64, conf float64) (Interval, error) {
	if n < 0 || x < 0 || x > n {
		return Interval{}, fmt.Errorf("plan: %d successes of %d trials", x, n)
	}
	if !(conf > 0 && conf < 1) {
		return Interval{}, fmt.Errorf("plan: confidence %v outside (0, 1)", conf)
	}
	alpha := 1 - conf
	iv := Interval{Low: 0, High: 1}
	if x > 0 {
		iv.Low = betaQuantile(alpha/2, float64(x), float64(n-x+1))
	}
	if x < n {
		iv.High = betaQuantile(1-alpha/2, float64(x+1), float64(n-x))
	}
	return iv, nil
}

// betaQuantile returns t with I_t(a, b) = q, by bisection: I is
// increasing in t, and 200 halvings of [0, 1] reach float64's resolution.
func betaQuantile(q, a, b float64) float64 {
	lo, hi := 0.0, 1.0
	for range 200 {
		mid := lo + (hi-lo)/2
		if mid == lo || mid == hi {
			break
		}
		if regIncBeta(a, b, mid) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by
// its continued fraction (Numerical Recipes §6.4), on the side of x where
// it converges fast.
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the incomplete beta function's continued fraction by
// the modified Lentz method. It needs O(√max(a, b)) terms; the bound
// covers a million samples with room to spare.
func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 100_000
		eps     = 1e-16
		tiny    = 1e-300
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
