package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// workerClient sends signed commands to the worker of a tenant-env.
type workerClient struct {
	env    store.Env
	signer *trust.Signer
	hc     *http.Client // commands: bounded by a timeout
	stream *http.Client // streams: no timeout, bounded by the caller's context
}

func (s *Server) workerFor(ctx context.Context, tenant, env string) (*workerClient, error) {
	e, err := s.cfg.Store.GetEnv(ctx, tenant, env)
	if err != nil {
		return nil, fmt.Errorf("worker of %s/%s: %w", tenant, env, err)
	}
	// The master secret that signs now; a rotation's new one signs only
	// from its SignFrom on, once the workers have it.
	master := s.cfg.Commands.Signing(s.cfg.Now())
	return &workerClient{
		env: e,
		signer: &trust.Signer{
			Direction: trust.ToWorker, Tenant: tenant, Env: env,
			KeyID: master.ID, Key: trust.DeriveEnvKey(master.Secret, tenant, env), Now: s.cfg.Now,
		},
		hc:     s.workerHTTP,
		stream: s.workerStreamHTTP,
	}, nil
}

func (c *workerClient) url(path string, id string, query url.Values) string {
	p := strings.Replace(path, "{id}", url.PathEscape(id), 1)
	u := strings.TrimRight(c.env.WorkerURL, "/") + p
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return u
}

// errWorkerUnreachable marks a failure to talk to the worker at all.
var errWorkerUnreachable = errors.New("worker unreachable")

// do sends a signed command and decodes a 2xx answer into out. A worker's
// error answer becomes an *httpapi.Error with the worker's status, code and
// message, which are safe to pass on.
func (c *workerClient) do(ctx context.Context, method, path, id string, in, out any) (int, error) {
	return c.doQuery(ctx, method, path, id, nil, 1<<20, in, out)
}

// doQuery is do with a query string and a bound on the answer's bytes.
func (c *workerClient) doQuery(ctx context.Context, method, path, id string, query url.Values, limit int64, in, out any) (_ int, err error) {
	if tr := observe.FromContext(ctx, "controlplane"); tr != nil {
		var span trace.Span
		ctx, span = tr.Start(ctx, "worker "+method+" "+path, trace.WithSpanKind(trace.SpanKindClient))
		defer func() { observe.End(span, err, errorCode(err)) }()
	}
	var body []byte
	contentType := ""
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, err
		}
		contentType = "application/json"
	}
	return c.doBody(ctx, method, path, id, query, contentType, body, limit, out)
}

// doBody is doQuery with a body of any type, sent as it is.
func (c *workerClient) doBody(ctx context.Context, method, path, id string, query url.Values, contentType string, body []byte, limit int64, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, id, query), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	// Not covered by the signature (docs/observability.md): the worker
	// continues the trace only once the signature has verified.
	observe.Inject(ctx, req.Header)
	c.signer.Sign(req, body)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errWorkerUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errWorkerUnreachable, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, workerError(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("worker answered malformed JSON: %w", err)
		}
	}
	return resp.StatusCode, nil
}

func workerError(resp *http.Response, body []byte) error {
	status := resp.StatusCode
	var e contract.Error
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return &httpapi.Error{Status: http.StatusBadGateway, Code: contract.CodeUnavailable,
			Msg: "the conversation's worker failed", Err: fmt.Errorf("worker answered %d", status)}
	}
	if status == http.StatusUnauthorized {
		// The worker refused our signature: a configuration fault of ours,
		// not the browser's.
		return &httpapi.Error{Status: http.StatusBadGateway, Code: contract.CodeUnavailable,
			Msg: "the conversation's worker refused the control-plane's credentials", Err: errors.New(e.Error.Message)}
	}
	return &httpapi.Error{Status: status, Code: e.Error.Code, Msg: e.Error.Message, RetryAfter: resp.Header.Get("Retry-After")}
}

// streamEvents follows the worker's event stream after seq, calling fn with
// each raw SSE event, until the stream ends, ctx ends or fn fails.
func (c *workerClient) streamEvents(ctx context.Context, id string, after int64, fn func(sse.Event) error) error {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(contract.StreamPath, id, q), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.signer.Sign(req, nil)
	resp, err := c.stream.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errWorkerUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return workerError(resp, data)
	}
	r := sse.NewReader(resp.Body, 4<<20)
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return fmt.Errorf("%w: %w", errWorkerUnreachable, err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}
