package store

// MergeJob applies the lifecycle event e to a job's record by RecordJob's
// rules (see the package doc): exists says whether there is a live record
// old. It returns the new record and whether e advanced the status. Stores
// that keep a job as one value (the SQLite store of local mode) merge with
// it, so that every store merges exactly as Memory does.
func MergeJob(old JobRecord, exists bool, e JobRecord) (JobRecord, bool) {
	if !exists {
		old = JobRecord{}
	}
	advance := !exists || old.Status < e.Status
	return mergeJob(old, e, advance), advance
}

// ValidateJob returns the error RecordJob returns for an event it refuses
// (no id, or no status).
func ValidateJob(j JobRecord) error { return validateJob(j) }
