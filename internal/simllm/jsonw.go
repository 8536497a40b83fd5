package simllm

import "strconv"

// Responses are built by appending bytes: the hot path answers thousands of
// requests a second and encoding/json's reflection would dominate it.

const hexDigits = "0123456789abcdef"

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }
