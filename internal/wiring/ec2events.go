package wiring

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/skiffci/skiff/pkg/instanceevents"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// NewEC2Events builds the production EC2-event service: the runner ledger
// in DynamoDB, EMF metrics on stdout, and the given logger.
func NewEC2Events(_ context.Context, cfg instanceevents.Config, awsCfg aws.Config, logger *slog.Logger) (*instanceevents.Service, error) {
	ddb := newDynamoDB(awsCfg)
	dl := dynamostore.NewLedgerDynamo(ddb, cfg.TableName)
	counter := telemetry.NewEMF(os.Stdout, cfg.MetricsNamespace, names.FunctionEC2Events, nil)
	var ledger instanceevents.Ledger = dl
	if cfg.QueueURL != "" {
		rm, err := dynamoRoom(ddb, sqs.NewFromConfig(awsCfg), cfg.TableName, cfg.QueueURL, nil, dl, counter, nil, logger)
		if err != nil {
			return nil, err
		}
		ledger = WakingEvents{Ledger: room.Ledger{Ledger: dl, Room: rm}, Interruptions: dl}
	}
	return instanceevents.New(instanceevents.Options{
		Ledger:      ledger,
		Counter:     counter,
		Logger:      logger,
		RecordPools: cfg.MetricsPools,
	})
}
