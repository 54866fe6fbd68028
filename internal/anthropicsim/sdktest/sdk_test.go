package sdktest

import "testing"

func TestPlaceholder(t *testing.T) {}
