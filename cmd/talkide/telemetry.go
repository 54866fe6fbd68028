package main

import (
	"os"

	"github.com/talkide/platform/internal/telemetry"
)

// telemetryConfig reads the standard OTEL_* variables (docs/observability.md).
func telemetryConfig() (telemetry.Config, error) { return telemetry.ConfigFromEnv(os.Getenv) }
