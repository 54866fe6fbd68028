// Package trust provides the platform's credentials: identity tokens (stored
// hashed), short-lived WorkerTokens, and the HMAC request signatures carried in
// X-Worker-Token between the control-plane and a worker.
//
// It imports neither side of the seam; both use it. Every secret comparison
// is constant-time, and no error it returns contains a secret.
package trust
