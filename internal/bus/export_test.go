package bus

// Covers exposes covers to the tests.
var Covers = covers

// KeepAlive exposes the worker's keep-alive to the tests.
var KeepAlive = keepAlive
