package store

// SplitStatements exposes the no-transaction splitter to the tests.
var SplitStatements = splitStatements

// FullXid exposes fullXid to the tests.
var FullXid = fullXid

// Pipeline makes tx queue its blind writes, as the signal batches do.
func (tx *Tx) Pipeline() { tx.pipeline() }
