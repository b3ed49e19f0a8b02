package wiring

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// countingResolver answers with an endpoint naming the region, and counts
// the calls; a region "fail" is an error.
type countingResolver struct{ calls int }

func (r *countingResolver) ResolveEndpoint(_ context.Context, p dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	r.calls++
	if aws.ToString(p.Region) == "fail" {
		return smithyendpoints.Endpoint{}, errors.New("no endpoint")
	}
	return smithyendpoints.Endpoint{URI: url.URL{Scheme: "https", Host: aws.ToString(p.Region) + ".example"}}, nil
}

// TestDynamoEndpointsKeepAnswersPerParameters: the resolver is asked once
// per set of parameters, every parameter counts, and errors are not kept.
func TestDynamoEndpointsKeepAnswersPerParameters(t *testing.T) {
	t.Parallel()
	next := &countingResolver{}
	r := &dynamoEndpoints{next: next}
	ctx := context.Background()
	params := []struct {
		name string
		p    dynamodb.EndpointParameters
		host string
	}{
		{"region", dynamodb.EndpointParameters{Region: aws.String("us-east-1")}, "us-east-1.example"},
		{"another region", dynamodb.EndpointParameters{Region: aws.String("eu-west-1")}, "eu-west-1.example"},
		{"FIPS", dynamodb.EndpointParameters{Region: aws.String("us-east-1"), UseFIPS: aws.Bool(true)}, "us-east-1.example"},
		{"dual-stack", dynamodb.EndpointParameters{Region: aws.String("us-east-1"), UseDualStack: aws.Bool(true)}, "us-east-1.example"},
		{"account", dynamodb.EndpointParameters{Region: aws.String("us-east-1"), AccountId: aws.String("123456789012")}, "us-east-1.example"},
		{"table ARN", dynamodb.EndpointParameters{Region: aws.String("us-east-1"), ResourceArn: aws.String("arn:aws:dynamodb:us-east-1:1:table/t")}, "us-east-1.example"},
	}
	for round := range 3 {
		for _, c := range params {
			e, err := r.ResolveEndpoint(ctx, c.p)
			if err != nil || e.URI.Host != c.host {
				t.Errorf("round %d, %s: %v, %v", round, c.name, e.URI.Host, err)
			}
		}
	}
	errorsNotKept(t, r, dynamodb.EndpointParameters{Region: aws.String("fail")}, next, len(params))
}

// errorsNotKept checks that next, behind r, was asked once per set of
// parameters (asked times), then that r asks it again for each of two
// calls with parameters fail, which fail.
func errorsNotKept[P any](t *testing.T, r interface {
	ResolveEndpoint(context.Context, P) (smithyendpoints.Endpoint, error)
}, fail P, next *countingResolver, asked int) {
	t.Helper()
	if next.calls != asked {
		t.Errorf("resolver asked %d times, want once per set of parameters (%d)", next.calls, asked)
	}
	for range 2 {
		if _, err := r.ResolveEndpoint(context.Background(), fail); err == nil {
			t.Error("error not returned")
		}
	}
	if next.calls != asked+2 {
		t.Errorf("resolver asked %d times after two failures, want %d (errors are not kept)", next.calls, asked+2)
	}
}

// countingSQSResolver is countingResolver for SQS.
type countingSQSResolver struct{ countingResolver }

func (r *countingSQSResolver) ResolveEndpoint(ctx context.Context, p sqs.EndpointParameters) (smithyendpoints.Endpoint, error) {
	return r.countingResolver.ResolveEndpoint(ctx, dynamodb.EndpointParameters{Region: p.Region})
}

// TestSQSEndpointsKeepAnswersPerParameters: as for DynamoDB, the resolver
// is asked once per set of parameters, and errors are not kept.
func TestSQSEndpointsKeepAnswersPerParameters(t *testing.T) {
	t.Parallel()
	next := &countingSQSResolver{}
	r := &sqsEndpoints{next: next}
	ctx := context.Background()
	params := []sqs.EndpointParameters{
		{Region: aws.String("us-east-1")},
		{Region: aws.String("eu-west-1")},
		{Region: aws.String("us-east-1"), UseFIPS: aws.Bool(true)},
		{Region: aws.String("us-east-1"), UseDualStack: aws.Bool(true)},
		{Region: aws.String("us-east-1"), Endpoint: aws.String("http://localhost:4566")},
	}
	for round := range 3 {
		for i, p := range params {
			e, err := r.ResolveEndpoint(ctx, p)
			if want := aws.ToString(p.Region) + ".example"; err != nil || e.URI.Host != want {
				t.Errorf("round %d, parameters %d: %v, %v; want %s", round, i, e.URI.Host, err, want)
			}
		}
	}
	errorsNotKept(t, r, sqs.EndpointParameters{Region: aws.String("fail")}, &next.countingResolver, len(params))
}
