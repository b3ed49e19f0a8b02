package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
)

// HandleEncoded handles a delivery as a front that carries the body as text
// hands it: the HTTP method, the headers (any case; Lambda lowercases them)
// and the body, base64-encoded when isBase64 says so (Lambda Function URLs
// encode bodies that are not plain text). A base64 body is decoded before
// the signature is checked, and refused unread when its decoded size could
// only be over the limit. functions/webhook translates Lambda's Function URL
// event into this call.
func (h *Handler) HandleEncoded(ctx context.Context, method string, headers map[string]string, body string, isBase64 bool) Response {
	if method != "" && method != http.MethodPost {
		return reply(http.StatusMethodNotAllowed, "method_not_allowed")
	}
	req := Request{
		Event:     header(headers, "x-github-event"),
		Delivery:  header(headers, "x-github-delivery"),
		Signature: header(headers, "x-hub-signature-256"),
	}
	req.SHA1Only = req.Signature == "" && header(headers, "x-hub-signature") != ""
	if isBase64 {
		// Refuse before decoding what could only be over the limit.
		if base64.StdEncoding.DecodedLen(len(body)) > h.o.MaxBodyBytes+3 {
			req.Oversize = true
		} else {
			b, err := base64.StdEncoding.DecodeString(body)
			if err != nil {
				h.o.Counter.Count(MetricRejected, "malformed")
				h.o.Logger.Warn("delivery rejected", "delivery_id", req.Delivery, "status", http.StatusBadRequest, "reason", "malformed", "detail", "body is not valid base64")
				return reply(http.StatusBadRequest, "malformed")
			}
			req.Body = b
		}
	} else {
		req.Body = []byte(body)
	}
	return h.Handle(ctx, req)
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
