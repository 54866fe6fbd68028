// This nested module exists only because the root go.mod does not (yet)
// require the official SDK, and this package's tests need it as a real
// client. When the root module requires github.com/anthropics/anthropic-sdk-go/v2,
// delete this go.mod and go.sum and the package joins the root module as is.
module github.com/talkide/platform/internal/anthropicsim/sdktest

go 1.26.8

replace github.com/talkide/platform => ../../..
