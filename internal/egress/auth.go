package egress

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Why a request was not authenticated, for the log; the client is told
// only that it must authenticate.
const (
	reasonNoCredential        = "no_credential"
	reasonMalformedCredential = "malformed_credential"
	reasonBadCapability       = "bad_capability"
)

// maxCredentialLen bounds the header decoded: a conversation id and a
// capability are well under 300 bytes together.
const maxCredentialLen = 1024

// parseProxyAuth returns the conversation id and the capability of a
// request's Proxy-Authorization: Basic header (the userinfo of the proxy
// URL the sandbox was given), or the reason it has none usable.
func parseProxyAuth(h http.Header) (conv, capability, reason string) {
	vals := h.Values("Proxy-Authorization")
	switch {
	case len(vals) == 0:
		return "", "", reasonNoCredential
	case len(vals) > 1, len(vals[0]) > maxCredentialLen:
		return "", "", reasonMalformedCredential
	}
	scheme, enc, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", reasonMalformedCredential
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", reasonMalformedCredential
	}
	conv, capability, ok = strings.Cut(string(raw), ":")
	if !ok || capability == "" || contract.ValidateConversationID(conv) != nil {
		return "", "", reasonMalformedCredential
	}
	return conv, capability, ""
}

// authenticate returns the conversation a request is from, or the reason
// it is not authenticated. The capability is compared in constant time
// with the one derived for the conversation it names, so one conversation's
// capability is worthless with another's id.
func (s *Server) authenticate(r *http.Request) (conv, reason string) {
	conv, presented, reason := parseProxyAuth(r.Header)
	if reason != "" {
		return "", reason
	}
	want := s.capability(conv)
	if want == "" || subtle.ConstantTimeCompare([]byte(presented), []byte(want)) != 1 {
		return "", reasonBadCapability
	}
	return conv, ""
}
