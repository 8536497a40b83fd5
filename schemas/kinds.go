package schemas

// MessageType is one message kind and a constructor of its zero value.
type MessageType struct {
	// Kind is the stable kind name, e.g. "job_spec".
	Kind string
	// New returns a pointer to a new zero value of the kind's type, ready
	// for Decode.
	New func() Message
}

// All lists every message kind, in the order a job meets them. The slice is
// the caller's.
func All() []MessageType {
	return []MessageType{
		{KindJobSpec, func() Message { return new(JobSpec) }},
		{KindSampleRequest, func() Message { return new(SampleRequest) }},
		{KindSampleResult, func() Message { return new(SampleResult) }},
		{KindStepDecided, func() Message { return new(StepDecided) }},
		{KindJobStatus, func() Message { return new(JobStatus) }},
		{KindJobReport, func() Message { return new(JobReport) }},
		{KindJobRecord, func() Message { return new(JobRecord) }},
		{KindLease, func() Message { return new(Lease) }},
		{KindJournalEntry, func() Message { return new(JournalEntry) }},
		{KindCheckpoint, func() Message { return new(Checkpoint) }},
		{KindDeadLetter, func() Message { return new(DeadLetter) }},
		{KindBreakGlassRequest, func() Message { return new(BreakGlassRequest) }},
		{KindBreakGlassResponse, func() Message { return new(BreakGlassResponse) }},
		{KindBreakGlassAudit, func() Message { return new(BreakGlassAudit) }},
		{KindBreakGlassApproval, func() Message { return new(BreakGlassApproval) }},
		{KindApprovalDecision, func() Message { return new(ApprovalDecision) }},
		{KindArbitrationRequest, func() Message { return new(ArbitrationRequest) }},
		{KindArbitrationResponse, func() Message { return new(ArbitrationResponse) }},
		{KindArbiterDecision, func() Message { return new(ArbiterDecision) }},
		{KindTaskRecord, func() Message { return new(TaskRecord) }},
		{KindControlRequest, func() Message { return new(ControlRequest) }},
		{KindDecideRequest, func() Message { return new(DecideRequest) }},
		{KindControlReply, func() Message { return new(ControlReply) }},
		{KindTenantQuota, func() Message { return new(TenantQuota) }},
		{KindBatchRecord, func() Message { return new(BatchRecord) }},
		{KindBatchItem, func() Message { return new(BatchItem) }},
		{KindAPIKey, func() Message { return new(APIKey) }},
		{KindRetentionPolicy, func() Message { return new(RetentionPolicy) }},
		{KindCalibration, func() Message { return new(Calibration) }},
		{KindModelPrice, func() Message { return new(ModelPrice) }},
		{KindDeployment, func() Message { return new(Deployment) }},
		{KindVoterPresence, func() Message { return new(VoterPresence) }},
		{KindCoordinatorPresence, func() Message { return new(CoordinatorPresence) }},
		{KindWebhookTask, func() Message { return new(WebhookTask) }},
		{KindWebhookDelivery, func() Message { return new(WebhookDelivery) }},
	}
}

// Interface checks.
var (
	_ Message = (*JobSpec)(nil)
	_ Message = (*SampleRequest)(nil)
	_ Message = (*SampleResult)(nil)
	_ Message = (*StepDecided)(nil)
	_ Message = (*JobStatus)(nil)
	_ Message = (*JobReport)(nil)
	_ Message = (*JobRecord)(nil)
	_ Message = (*Lease)(nil)
	_ Message = (*JournalEntry)(nil)
	_ Message = (*Checkpoint)(nil)
	_ Message = (*DeadLetter)(nil)
	_ Message = (*BreakGlassRequest)(nil)
	_ Message = (*BreakGlassResponse)(nil)
	_ Message = (*BreakGlassAudit)(nil)
	_ Message = (*BreakGlassApproval)(nil)
	_ Message = (*ApprovalDecision)(nil)
	_ Message = (*ArbitrationRequest)(nil)
	_ Message = (*TenantQuota)(nil)
	_ Message = (*BatchRecord)(nil)
	_ Message = (*BatchItem)(nil)
	_ Message = (*APIKey)(nil)
	_ Message = (*RetentionPolicy)(nil)
	_ Message = (*Calibration)(nil)
	_ Message = (*ModelPrice)(nil)
	_ Message = (*Deployment)(nil)
	_ Message = (*WebhookTask)(nil)
	_ Message = (*WebhookDelivery)(nil)
	_ Message = (*VoterPresence)(nil)
	_ Message = (*CoordinatorPresence)(nil)
	_ Message = (*ArbitrationResponse)(nil)
	_ Message = (*ArbiterDecision)(nil)
	_ Message = (*TaskRecord)(nil)
	_ Message = (*ControlRequest)(nil)
	_ Message = (*DecideRequest)(nil)
	_ Message = (*ControlReply)(nil)
)
