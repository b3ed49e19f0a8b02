package dynamostore_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/ledger/ledgertest"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/room"
	"github.com/skiffci/skiff/pkg/room/roomtest"
	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/dynamostore"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestRoomDynamo(t *testing.T) {
	t.Parallel()
	roomtest.Run(t, func(t *testing.T) room.Store {
		return dynamostore.NewRoomDynamo(testenv.MotoTable(t, "skiff-room"))
	})
}

func newLaunchDynamo(t *testing.T) ledger.Launches {
	t.Helper()
	// moto: the fenced launch intent is a transaction, which dynalite lacks.
	return dynamostore.NewLaunchDynamo(testenv.MotoTable(t, "skiff-launch"))
}

func TestLaunchDynamo(t *testing.T) {
	t.Parallel()
	ledgertest.RunLaunches(t, newLaunchDynamo)
}

// TestInstallationsDynamo runs the suite against DynamoDB (dynalite)
// through the real SDK: the conditional PutItem is the ordering.
func TestInstallationsDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunInstallations(t, func(t *testing.T) store.Installations {
		return dynamostore.NewInstallationsDynamo(testenv.DynaliteTable(t, "installations"))
	})
}

// TestSecurityDynamo runs the security events' suite against DynamoDB
// (dynalite) through the real SDK.
func TestSecurityDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunSecurityEvents(t, func(t *testing.T) store.SecurityEvents {
		return dynamostore.NewSecurityDynamo(testenv.DynaliteTable(t, "security"))
	})
}

// TestRunnerDynamo runs the runner state's suite against DynamoDB
// (dynalite) through the real SDK.
func TestRunnerDynamo(t *testing.T) {
	t.Parallel()
	storetest.RunRunnerState(t, func(t *testing.T) store.RunnerState {
		return dynamostore.NewRunnerDynamo(testenv.DynaliteTable(t, "runners"))
	})
}

// The runner state's partition is the one the CDK app scopes the functions' access by.
func TestRunnerPartitionName(t *testing.T) {
	t.Parallel()
	if dynamostore.RunnerVersionPartition != names.RunnerStatePartition {
		t.Errorf("partition %q, the CDK app grants %q", dynamostore.RunnerVersionPartition, names.RunnerStatePartition)
	}
}
