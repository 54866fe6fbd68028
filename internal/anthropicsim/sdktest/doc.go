// Package sdktest checks the simulator against the official Anthropic Go SDK
// used as a real client. It has tests only.
package sdktest
