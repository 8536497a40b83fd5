package schemas

// Speculation (JobSpec.SpeculationDepth, SpeculationMaxWaste): sampling
// steps ahead of the open one from a guess of each winner.

// DefaultSpeculationMaxWaste is SpeculationMaxWaste when omitted.
const DefaultSpeculationMaxWaste = 0.1

// MaxWaste is SpeculationMaxWaste, or its default when omitted.
func (s *JobSpec) MaxWaste() float64 {
	if s.SpeculationMaxWaste == 0 {
		return DefaultSpeculationMaxWaste
	}
	return s.SpeculationMaxWaste
}

// checkSpeculation validates the speculation fields of a message of kind
// k.
func (s *JobSpec) checkSpeculation(k string) error {
	if s.SpeculationDepth < 0 || s.SpeculationDepth > MaxSpeculationDepth {
		return invalid(k, "speculation_depth must be between 0 (off) and %d, got %d", MaxSpeculationDepth, s.SpeculationDepth)
	}
	// 0 is "omitted": the default share.
	if s.SpeculationMaxWaste != 0 && !(s.SpeculationMaxWaste > 0 && s.SpeculationMaxWaste <= 1) {
		return invalid(k, "speculation_max_waste must be in (0, 1], got %v", s.SpeculationMaxWaste)
	}
	return nil
}
