package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/gateway"
)

// gatewayFlags bound what the gateway holds of model-call bodies; talkide
// controlplane and talkide dev share them. Sizes are quantities like 32Mi.
type gatewayFlags struct {
	maxBody, maxBuffered string
}

func registerGatewayFlags(fs *pflag.FlagSet, f *gatewayFlags) {
	fs.StringVar(&f.maxBody, "gateway-max-body", size(gateway.DefaultMaxBody), "largest model-call body the gateway accepts, like 32Mi; a larger one is answered 413 (docs/gateway.md)")
	fs.StringVar(&f.maxBuffered, "gateway-max-buffered", size(gateway.DefaultMaxBuffered), "bytes of model-call bodies the gateway holds in memory at once across all calls, like 128Mi; a call that finds no room is answered 503 with Retry-After before its body is read (docs/gateway.md)")
	cli.BindEnv(fs, "gateway-max-body", "gateway-max-buffered")
}

// options parses the flags into the gateway's options, refusing a size
// that is not a positive quantity, or a body larger than the bound on all
// bodies, which no call could then send.
func (f gatewayFlags) options(cmd *cobra.Command) (maxBody, maxBuffered int64, err error) {
	sizes := [2]int64{}
	for i, fl := range []struct{ name, value string }{{"gateway-max-body", f.maxBody}, {"gateway-max-buffered", f.maxBuffered}} {
		q, err := resource.ParseQuantity(fl.value)
		if err != nil || q.Sign() <= 0 {
			return 0, 0, cli.Usagef(cmd, "--%s %q: want a positive size like 32Mi", fl.name, fl.value)
		}
		n, ok := q.AsInt64()
		if !ok {
			return 0, 0, cli.Usagef(cmd, "--%s %q: too large", fl.name, fl.value)
		}
		sizes[i] = n
	}
	if sizes[0] > sizes[1] {
		return 0, 0, cli.Usagef(cmd, "--gateway-max-body %s is larger than --gateway-max-buffered %s: no call could be buffered", f.maxBody, f.maxBuffered)
	}
	return sizes[0], sizes[1], nil
}

// size spells n bytes as a quantity (32Mi).
func size(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
