package store

// SplitStatements exposes the no-transaction splitter to the tests.
var SplitStatements = splitStatements

// FullXid exposes fullXid to the tests.
var FullXid = fullXid
