package bus

import "strings"

// inboxRoot is where every client's replies come: nats.go's default inbox
// prefix, and the root of each identity's own (_INBOX.<identity>).
const inboxRoot = "_INBOX."

// InboxReply reports whether a service may answer a request on reply: a
// literal subject under "_INBOX.". A request's reply subject is the
// requester's to choose and the server does not check it, so a service
// that answered anywhere would publish, with its own permissions, where
// the requester may not: a coordinator's answer on $KV.<ns>_jobs.<other
// tenant>.<job> would overwrite that job's record. A request whose reply
// is not an inbox is refused before it is acted on.
func InboxReply(reply string) bool {
	rest, ok := strings.CutPrefix(reply, inboxRoot)
	if !ok || rest == "" {
		return false
	}
	for tok := range strings.SplitSeq(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}
