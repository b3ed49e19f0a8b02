package wiring

import (
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/queue/sqsqueue"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// dynamoRoom is the waiting room over the state table, offering jobs on
// the job queue. pools may be nil where it only wakes (the EC2 events).
func dynamoRoom(ddb *dynamodb.Client, sqsc *sqs.Client, table, queueURL string, pools *pool.Config, ledger store.Ledger,
	counter telemetry.Counter, gauges telemetry.Gauges, logger *slog.Logger) (*room.Service, error) {
	return room.New(room.Options{Room: dynamostore.NewRoomDynamo(ddb, table), Queue: sqsqueue.NewSQS(sqsc, queueURL),
		Jobs: dynamostore.NewDynamo(ddb, table), Pools: pools, Ledger: ledger, Counter: counter, Gauges: gauges, Logger: logger})
}

// WakingEvents is the ledger as the state-change service writes it, with
// the waiting room woken when a runner ends.
type WakingEvents struct {
	room.Ledger
	store.Interruptions
}
