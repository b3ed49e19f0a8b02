package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skiffci/skiff/pkg/webhook"
)

// functionURL translates a buffered Lambda Function URL invocation (payload
// format 2.0) into the handler's call and its answer back. Its error is
// always nil: failures are answered with a status code, so Lambda never
// reports an internal error to GitHub.
func functionURL(h *webhook.Handler) func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	return func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		resp := h.HandleEncoded(ctx, ev.RequestContext.HTTP.Method, ev.Headers, ev.Body, ev.IsBase64Encoded)
		return events.LambdaFunctionURLResponse{
			StatusCode: resp.Status, Headers: map[string]string{"content-type": "application/json"}, Body: resp.Body,
		}, nil
	}
}
