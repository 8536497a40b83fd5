package bus

// Covers exposes covers to the tests.
var Covers = covers
