package step

// The policy of adaptive k and of the correlation test; the statistics
// themselves are internal/core/plan's (Wilson, LogPVote, ChooseK,
// RaceQuantile).

const (
	// relConfidence is the confidence of a receipt's interval for p: a
	// two-sided Wilson score interval, so p_low is a one-sided 99.5 %
	// lower bound.
	relConfidence = 0.99
	// relZ is the normal quantile of relConfidence, two-sided.
	relZ = 2.5758293035489004
	// priorWeight is how many votes the job's p_estimate counts as in the
	// estimate of p: enough to start from it, little enough that the
	// job's own votes outweigh it within a few steps.
	priorWeight = 10
	// falseAlarm is the correlation test's false-alarm rate: a step whose
	// votes are independent with chance p >= p_low of being right is
	// flagged with at most this chance.
	falseAlarm = 0.001
)
