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
	sizes, err := parseSizes(cmd, "gateway-max-body", f.maxBody, "gateway-max-buffered", f.maxBuffered)
	if err != nil {
		return 0, 0, err
	}
	if sizes[0] > sizes[1] {
		return 0, 0, cli.Usagef(cmd, "--%s %s is larger than --%s %s: no call could be buffered", "gateway-max-body", f.maxBody, "gateway-max-buffered", f.maxBuffered)
	}
	return sizes[0], sizes[1], nil
}

// parseSizes parses flags' values, given as name, value, name, value…, as
// positive quantities of bytes (32Mi), refusing any other as a usage
// error that names its flag.
func parseSizes(cmd *cobra.Command, nameValues ...string) ([]int64, error) {
	sizes := make([]int64, 0, len(nameValues)/2)
	for i := 0; i+1 < len(nameValues); i += 2 {
		name, value := nameValues[i], nameValues[i+1]
		q, err := resource.ParseQuantity(value)
		if err != nil || q.Sign() <= 0 {
			return nil, cli.Usagef(cmd, "--%s %q: want a positive size like 32Mi", name, value)
		}
		n, ok := q.AsInt64()
		if !ok {
			return nil, cli.Usagef(cmd, "--%s %q: too large", name, value)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// size spells n bytes as a quantity (32Mi).
func size(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }
