package store_test

import (
	"testing"

	"github.com/skiffci/skiff/pkg/store"
	"github.com/skiffci/skiff/pkg/store/storetest"
)

func TestInstallationsMemory(t *testing.T) {
	t.Parallel()
	storetest.RunInstallations(t, func(*testing.T) store.Installations { return store.NewInstallationsMemory() })
}

func TestSecurityMemory(t *testing.T) {
	t.Parallel()
	storetest.RunSecurityEvents(t, func(*testing.T) store.SecurityEvents { return store.NewSecurityMemory(nil) })
}
