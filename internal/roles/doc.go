// Package roles assembles the platform's long-running roles from their
// parts: the control-plane (browser API, gateway-proxy, mint, reports,
// operator API, and the Kubernetes provisioner when asked), a tenant-env's
// worker (command API, agent loop, session store, LocalGatewayProxy,
// sandbox, egress proxy, Build runner), and dev, both on one machine with
// the model simulator when no API key is given.
//
// Each role owns its parts in a lifecycle.Group: started in order, stopped
// in reverse, every goroutine waited for, the first fatal error returned.
// cmd/talkide turns flags into these configurations and signals into a
// context; the benchmarks and the integration tests start the same roles
// through the same calls.
//
// This is the one package besides cmd/talkide that sees both sides of the
// seam: the control-plane's and the worker's parts meet here only to be
// started side by side (dev), never to call each other but over HTTP.
package roles
