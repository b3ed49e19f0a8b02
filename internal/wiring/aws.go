package wiring

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
)

// newDynamoDB is the DynamoDB client every function builds from awsCfg
// (whose HTTP client and retryer all its clients share): the SDK's, with
// its endpoint resolver's answers kept per set of parameters.
//
// The SDK resolves the endpoint on every call by evaluating DynamoDB's
// endpoint rules (account-based endpoints, FIPS, dual-stack, table ARNs);
// on the webhook's hot path that was 12 % of the CPU of a queued event
// (the evaluation and the goroutine stack it grows: 50–60 µs on the
// development machine), for an answer that depends only on parameters
// that do not change within a container.
func newDynamoDB(awsCfg aws.Config) *dynamodb.Client {
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.EndpointResolverV2 = &dynamoEndpoints{next: o.EndpointResolverV2}
	})
}

// withoutUserAgent returns awsCfg whose clients send no User-Agent or
// amz-sdk-invocation-id header of the SDK's making: on the webhook's hot
// path, building the user agent string on every call was about 5 % of a
// queued event's CPU. Neither header is needed by SQS or DynamoDB; the
// retry, signing, clock-skew and recursion-detection steps stay.
func withoutUserAgent(awsCfg aws.Config) aws.Config {
	awsCfg.APIOptions = append(awsCfg.APIOptions[:len(awsCfg.APIOptions):len(awsCfg.APIOptions)], func(s *middleware.Stack) error {
		for _, id := range []string{(*awsmiddleware.RequestUserAgent)(nil).ID(), (*awsmiddleware.ClientRequestID)(nil).ID()} {
			if _, err := s.Build.Remove(id); err != nil {
				return fmt.Errorf("removing the %s step: %w", id, err)
			}
		}
		return nil
	})
	return awsCfg
}

// maxKeptEndpoints bounds dynamoEndpoints' memory: a container sees one
// set of parameters per table ARN it names (at most a few); past the bound
// the resolver is asked every time.
const maxKeptEndpoints = 64

// dynamoEndpoints is a dynamodb.EndpointResolverV2 that asks next once per
// set of parameters and keeps its answers (never its errors). The SDK does
// not modify a resolved endpoint, so the kept one is shared between calls.
type dynamoEndpoints struct {
	next dynamodb.EndpointResolverV2
	mu   sync.RWMutex
	kept map[dynamoEndpointKey]smithyendpoints.Endpoint
}

// dynamoEndpointKey is dynamodb.EndpointParameters by value: every field
// the rules read.
type dynamoEndpointKey struct {
	region, endpoint, accountID, accountIDMode, resourceARN, resourceARNs string
	dualStack, fips                                                       bool
}

// ResolveEndpoint implements dynamodb.EndpointResolverV2.
func (r *dynamoEndpoints) ResolveEndpoint(ctx context.Context, p dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := dynamoEndpointKey{
		region: aws.ToString(p.Region), endpoint: aws.ToString(p.Endpoint), accountID: aws.ToString(p.AccountId),
		accountIDMode: aws.ToString(p.AccountIdEndpointMode), resourceARN: aws.ToString(p.ResourceArn),
		resourceARNs: strings.Join(p.ResourceArnList, "\x00"), dualStack: aws.ToBool(p.UseDualStack), fips: aws.ToBool(p.UseFIPS),
	}
	r.mu.RLock()
	e, ok := r.kept[k]
	r.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := r.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	r.mu.Lock()
	if r.kept == nil {
		r.kept = map[dynamoEndpointKey]smithyendpoints.Endpoint{}
	}
	if len(r.kept) < maxKeptEndpoints {
		r.kept[k] = e
	}
	r.mu.Unlock()
	return e, nil
}
