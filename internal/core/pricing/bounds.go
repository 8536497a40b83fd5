package pricing

import "github.com/makerfleet/makerfleet/task"

// Token bounds of one chat call. Tokenizers of the chat models (byte-level
// BPE) never produce more tokens than bytes, and chat formats add a few
// tokens per message and to prime the reply (OpenAI's: 3 and 3): the
// bounds below are generous.
const (
	// TokensPerMessage bounds the chat format's tokens around a message.
	TokensPerMessage = 8
	// TokensPerReply bounds the tokens that prime the reply.
	TokensPerReply = 8
)

// PromptTokensBound is an upper bound of the prompt tokens a model can
// count for msgs: every byte of each role and content one token, plus the
// chat format's overhead.
func PromptTokensBound(msgs []task.Message) int64 {
	n := int64(TokensPerReply)
	for _, m := range msgs {
		n += int64(len(m.Role)+len(m.Content)) + TokensPerMessage
	}
	return n
}
