package dynamostore

// ClassifyTxForTest exposes classifyTx to the external tests: which items'
// conditions failed, whether a transaction conflicted, and whether the
// error is a cancellation a retry resolves at all.
func ClassifyTxForTest(err error, n int) (failed []bool, conflict, ok bool) {
	f, ok := classifyTx(err, n)
	if !ok {
		return nil, false, false
	}
	return f.conditionFailed, f.conflict, true
}
