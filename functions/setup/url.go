package main

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// maxRequestBytes bounds a request body: the setup form is a few fields.
const maxRequestBytes = 64 << 10

// functionURL serves h behind a buffered Function URL (payload format 2.0):
// the event becomes an *http.Request whose host is the Function URL's own
// domain (not the client's Host header), and the recorded answer goes back
// with its cookies in the response's cookie list. Its error is always nil.
func functionURL(h http.Handler) func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	return func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		r, err := toRequest(ctx, ev)
		if err != nil {
			return events.LambdaFunctionURLResponse{StatusCode: http.StatusBadRequest,
				Headers: map[string]string{"content-type": "text/plain"}, Body: "bad request\n"}, nil
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		res := rec.Result()
		out := events.LambdaFunctionURLResponse{StatusCode: res.StatusCode, Headers: map[string]string{}, Body: rec.Body.String()}
		for k, v := range res.Header {
			if strings.EqualFold(k, "Set-Cookie") {
				out.Cookies = append(out.Cookies, v...)
				continue
			}
			out.Headers[strings.ToLower(k)] = strings.Join(v, ", ")
		}
		return out, nil
	}
}

func toRequest(ctx context.Context, ev events.LambdaFunctionURLRequest) (*http.Request, error) {
	body := ev.Body
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, err
		}
		body = string(b)
	}
	if len(body) > maxRequestBytes {
		return nil, http.ErrBodyNotAllowed
	}
	path := ev.RawPath
	if path == "" {
		path = "/"
	}
	u := &url.URL{Scheme: "https", Host: ev.RequestContext.DomainName, Path: path, RawQuery: ev.RawQueryString}
	r, err := http.NewRequestWithContext(ctx, ev.RequestContext.HTTP.Method, u.String(), strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range ev.Headers {
		r.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		r.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	r.Host = ev.RequestContext.DomainName
	return r, nil
}
