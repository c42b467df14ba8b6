package wire

// Topic names one kind of journal event (see docs/architecture.md, "The
// event journal"). Code that journals or matches an event uses these
// constants, never a string literal, so that a misspelt topic does not
// compile and every topic the server can journal is listed here.
type Topic string

// Event topics. Black-box tests and SSE subscribers match these strings.
const (
	TopicProjectCreated  Topic = "project.created"
	TopicProjectUpdated  Topic = "project.updated"
	TopicProjectArchived Topic = "project.archived"

	TopicWorkItemCreated       Topic = "work_item.created"
	TopicWorkItemUpdated       Topic = "work_item.updated"
	TopicWorkItemStatusChanged Topic = "work_item.status_changed"
	TopicWorkItemReparented    Topic = "work_item.reparented"
	TopicWorkItemDeleted       Topic = "work_item.deleted"

	TopicRunCreated           Topic = "run.created"
	TopicRunDispatched        Topic = "run.dispatched"
	TopicRunDispatchWithdrawn Topic = "run.dispatch_withdrawn"
	TopicRunSpawning          Topic = "run.spawning"
	TopicRunStarted           Topic = "run.started"
	TopicRunProgress          Topic = "run.progress"
	TopicRunCompleted         Topic = "run.completed"
	TopicRunFinished          Topic = "run.finished"
	TopicRunExited            Topic = "run.exited"
	TopicRunFailed            Topic = "run.failed"
	TopicRunStopped           Topic = "run.stopped"
	TopicRunRequeued          Topic = "run.requeued"
	TopicRunSignalReceived    Topic = "run.signal_received"
	TopicRunStaleSignal       Topic = "run.stale_signal"
	TopicRunOrphanDetected    Topic = "run.orphan_detected"
	TopicRunStaleSession      Topic = "run.stale_session"
	TopicRunLeaseAcquired     Topic = "run.lease_acquired"
	TopicRunLeaseReleased     Topic = "run.lease_released"
	// TopicRunAttention journals every change of a live run's attention;
	// its payload has attention, source and from (the value before).
	TopicRunAttention Topic = "run.attention"
	// Workspaces (docs/architecture.md#workspaces).
	TopicRunWorkspaceReady   Topic = "run.workspace_ready"
	TopicRunWorkspaceRemoved Topic = "run.workspace_removed"
	TopicRunWorkspacePushed  Topic = "run.workspace_pushed"

	TopicHostCreated  Topic = "host.created"
	TopicHostUpdated  Topic = "host.updated"
	TopicHostDisabled Topic = "host.disabled"
	TopicHostEnabled  Topic = "host.enabled"
	TopicHostRemoved  Topic = "host.removed"

	// Named API tokens: created, and revoked (a rotation revokes the old
	// secret: payload rotated true).
	TopicTokenCreated Topic = "token.created"
	TopicTokenRevoked Topic = "token.revoked"

	TopicWorkerRegistered          Topic = "worker.registered"
	TopicWorkerOffline             Topic = "worker.offline"
	TopicWorkerLost                Topic = "worker.lost"
	TopicWorkerInstanceReinstalled Topic = "worker.instance_reinstalled"
	TopicWorkerInstanceSuspect     Topic = "worker.instance_suspect"
)
