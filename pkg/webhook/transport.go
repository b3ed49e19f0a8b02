package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
)

// FunctionURLRequest is the part of a Lambda Function URL event (payload
// format 2.0) the webhook reads. Its JSON shape is AWS's; declaring it here
// keeps pkg/ free of aws-lambda-go. Lambda lowercases header names.
type FunctionURLRequest struct {
	Headers         map[string]string `json:"headers"`
	Body            string            `json:"body"`
	IsBase64Encoded bool              `json:"isBase64Encoded"`
	RequestContext  struct {
		RequestID string `json:"requestId"`
		HTTP      struct {
			Method string `json:"method"`
		} `json:"http"`
	} `json:"requestContext"`
}

// FunctionURLResponse is a buffered Function URL response.
type FunctionURLResponse struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
}

var jsonHeaders = map[string]string{"content-type": "application/json"}

// HandleFunctionURL handles a Function URL invocation. It never returns an
// error: failures are answered with a status code, so Lambda never reports
// an internal error to GitHub.
func (h *Handler) HandleFunctionURL(ctx context.Context, ev FunctionURLRequest) (FunctionURLResponse, error) {
	if m := ev.RequestContext.HTTP.Method; m != "" && m != http.MethodPost {
		return FunctionURLResponse{StatusCode: http.StatusMethodNotAllowed, Headers: jsonHeaders, Body: `{"result":"method_not_allowed"}`}, nil
	}
	req := Request{
		Event:     header(ev.Headers, "x-github-event"),
		Delivery:  header(ev.Headers, "x-github-delivery"),
		Signature: header(ev.Headers, "x-hub-signature-256"),
	}
	req.SHA1Only = req.Signature == "" && header(ev.Headers, "x-hub-signature") != ""
	if ev.IsBase64Encoded {
		// Refuse before decoding what could only be over the limit.
		if base64.StdEncoding.DecodedLen(len(ev.Body)) > h.o.MaxBodyBytes+3 {
			req.Oversize = true
		} else {
			b, err := base64.StdEncoding.DecodeString(ev.Body)
			if err != nil {
				h.o.Counter.Count(MetricRejected, "malformed")
				h.o.Logger.Warn("delivery rejected", "delivery_id", req.Delivery, "status", http.StatusBadRequest, "reason", "malformed", "detail", "body is not valid base64")
				return FunctionURLResponse{StatusCode: http.StatusBadRequest, Headers: jsonHeaders, Body: `{"result":"malformed"}`}, nil
			}
			req.Body = b
		}
	} else {
		req.Body = []byte(ev.Body)
	}
	resp := h.Handle(ctx, req)
	return FunctionURLResponse{StatusCode: resp.Status, Headers: jsonHeaders, Body: resp.Body}, nil
}

// header finds a header by lowercase name, falling back to a
// case-insensitive scan for events built by hand.
func header(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// ServeHTTP serves the webhook over plain HTTP, for `skiff local` and tests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = io.WriteString(w, `{"result":"method_not_allowed"}`)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.o.MaxBodyBytes)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		body = nil
	case err != nil:
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"result":"malformed"}`)
		return
	}
	req := Request{
		Event:     r.Header.Get("X-GitHub-Event"),
		Delivery:  r.Header.Get("X-GitHub-Delivery"),
		Signature: r.Header.Get("X-Hub-Signature-256"),
		Body:      body,
		Oversize:  tooLarge != nil,
	}
	req.SHA1Only = req.Signature == "" && r.Header.Get("X-Hub-Signature") != ""
	resp := h.Handle(r.Context(), req)
	w.WriteHeader(resp.Status)
	_, _ = io.WriteString(w, resp.Body)
}
