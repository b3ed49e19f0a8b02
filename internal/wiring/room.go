package wiring

import (
	"context"
	"log/slog"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/freshness"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// dynamoRoom is the waiting room over the state table, offering jobs on
// the job queue. pools may be nil where it only wakes (the EC2 events).
func dynamoRoom(ddb *dynamodb.Client, sqsc *sqs.Client, table, queueURL string, pools *pool.Config, led ledger.Ledger,
	counter telemetry.Counter, gauges telemetry.Gauges, logger *slog.Logger) (*room.Service, error) {
	return room.New(room.Options{Room: dynamostore.NewRoomDynamo(ddb, table), Queue: sqsqueue.NewSQS(sqsc, queueURL),
		Jobs: dynamostore.NewDynamo(ddb, table), Pools: pools, Ledger: led, Counter: counter, Gauges: gauges, Logger: logger})
}

// failedCapacity is the memory of failed places an EC2 provider
// reads and writes: the waiting room's backoffs in the state table.
func failedCapacity(ddb *dynamodb.Client, table string) room.CapacityMemory {
	return room.CapacityMemory{Store: dynamostore.NewRoomDynamo(ddb, table)}
}

// WakingEvents is the ledger as the state-change service writes it, with
// the waiting room woken when a runner ends.
type WakingEvents struct {
	room.Ledger
	ledger.Interruptions
}

// runnerFreshness is the freshness check over the state table's runner
// state. The release list comes from github.com's actions/runner releases
// through the App's budget; a deployment on GitHub Enterprise Server
// (another API URL) has none: its pools pin runnerVersion, no window alarm
// is kept, and a refused runner still holds its pool.
func runnerFreshness(ddb *dynamodb.Client, table string, pools *pool.Config, gh *github.Client, apiURL string,
	gauges telemetry.Gauges, counter telemetry.Counter, logger *slog.Logger) (*freshness.Service, error) {
	var src runnerversion.Source
	if strings.TrimRight(apiURL, "/") == github.DefaultBaseURL {
		src = runnerversion.SourceFunc(func(ctx context.Context) ([]runnerversion.Release, error) {
			return gh.RunnerReleases(ctx, freshness.Installation(ctx))
		})
	}
	return freshness.New(freshness.Options{Pools: pools, State: dynamostore.NewRunnerDynamo(ddb, table), Source: src,
		Gauges: gauges, Count: counter, Logger: logger})
}
