package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/userdata"
)

// The state table's key design (pkg/store/dynamo.go, pkg/store/launch.go):
// string keys pk and sk, TTL attribute expires_at. pkg/store keeps these
// unexported and imports the AWS SDK, so they are repeated here and checked
// against its source by TestKeyNamesMatchStore.
const (
	attrPK      = userdata.AttrPK
	attrSK      = "sk"
	attrExpires = userdata.AttrExpiresAt
)

// Partition-key prefixes of the state table's items, by writer. The webhook
// may write only its own (IAM dynamodb:LeadingKeys); scale-up only its own.
var (
	// INSTALLATION#: the installations learnt from the installation webhook.
	webhookKeyPrefixes = []string{"JOB#", "RUN#", "INSTALLATION#"}
	// RUNNER# and INSTANCE#: scale-up reserves runners and records their launch in the ledger.
	// RUN#: admission reads the run's trigger the webhook recorded (without it, every
	// read is denied and scale-up asks GitHub instead). ONDEMAND#: the marks of
	// re-runs that launch on on-demand capacity.
	// RVERSION#: the runner release list (read, and written once a day) and the pools' holds (read, lifted).
	scaleUpKeyPrefixes = []string{"JOB#", "FLEET#", "POOL#", "RUNNER#", "INSTANCE#", "RUN#", "ONDEMAND#", "ROOM#", runnerStateKeyPrefix}
	// runnerStateKeyPrefix: the freshness check's items.
	runnerStateKeyPrefix = names.RunnerStatePartition
	// securityKeyPrefix: the security events the webhook records (PutItem
	// only: a compromised webhook can add events, not remove them).
	securityKeyPrefix = "SECURITY#"
)

// Queue settings. Each says why.
const (
	// MaxReceiveCount is above scale-up's SKIFF_MAX_ATTEMPTS (5), so scale-up
	// dead-letters a job itself, with its reason, before SQS would redrive it
	// without one; SQS's redrive is the backstop for a function that crashes.
	MaxReceiveCount = names.DefaultMaxAttempts + 3
	// visibilityFactor: AWS advises a visibility timeout of at least six
	// times the function timeout for SQS event sources.
	visibilityFactor = 6
	// jobRetention: a job still queued after a day is long abandoned by
	// GitHub; four days (SQS's default) leaves room to debug.
	jobRetentionDays = 4
	// deadLetterRetentionDays is SQS's maximum, time for the operator to redrive.
	deadLetterRetentionDays = 14
)

// buildData creates the KMS keys, the two tables and the two queues.
func (s *Skiff) buildData() {
	rp := s.props.RemovalPolicy
	s.StateKey = awskms.NewKey(s.Construct, jsii.String("StateKey"), &awskms.KeyProps{
		Description:       jsii.String("skiff " + s.prefix + ": the state table (deliveries, jobs, runs, launch claims)"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     rp,
	})
	s.RegistrationKey = awskms.NewKey(s.Construct, jsii.String("RegistrationKey"), &awskms.KeyProps{
		Description:       jsii.String("skiff " + s.prefix + ": the runner registration table (JIT configs, tokens)"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     rp,
	})
	s.StateTable = awsdynamodb.NewTable(s.Construct, jsii.String("StateTable"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(attrPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String(attrSK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(attrExpires),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:    awsdynamodb.TableEncryption_CUSTOMER_MANAGED,
		EncryptionKey: s.StateKey,
		RemovalPolicy: rp,
	})
	s.RegistrationTable = awsdynamodb.NewTable(s.Construct, jsii.String("RegistrationTable"), &awsdynamodb.TableProps{
		// A literal name: the boot script (pkg/userdata) is rendered at synth
		// time and must name the table.
		TableName:           jsii.String(s.physicalName(names.RoleRegistrationTable)),
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(attrPK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(attrExpires),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:    awsdynamodb.TableEncryption_CUSTOMER_MANAGED,
		EncryptionKey: s.RegistrationKey,
		RemovalPolicy: rp,
	})

	s.DeadLetterQueue = awssqs.NewQueue(s.Construct, jsii.String("DeadLetterQueue"), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(deadLetterRetentionDays)),
	})
	s.Queue = awssqs.NewQueue(s.Construct, jsii.String("JobQueue"), &awssqs.QueueProps{
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		RetentionPeriod:   awscdk.Duration_Days(jsii.Number(jobRetentionDays)),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(visibilityFactor * *scaleUpSpec().Timeout.ToSeconds(nil))),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           s.DeadLetterQueue,
			MaxReceiveCount: jsii.Number(MaxReceiveCount),
		},
	})
}

// buildSecrets creates the three secrets with generated values: the
// one-time setup secret that guards the setup page, and placeholders for the
// webhook secret and the App key, which the setup page replaces with the
// App's (docs/deploy.md). The functions treat the App key's placeholder as
// "no App yet". Nothing reads them at synth or deploy time, and a later
// deploy leaves their values alone (the generator's settings do not change).
func (s *Skiff) buildSecrets() {
	s.WebhookSecret = awssecretsmanager.NewSecret(s.Construct, jsii.String("WebhookSecret"), &awssecretsmanager.SecretProps{
		Description: jsii.String("skiff " + s.prefix + ": the GitHub App's webhook secret ({\"current\"[,\"previous\"]} or plain text). Written by the setup page."),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(48),
			ExcludePunctuation: jsii.Bool(true),
		},
	})
	s.AppKeySecret = awssecretsmanager.NewSecret(s.Construct, jsii.String("AppPrivateKey"), &awssecretsmanager.SecretProps{
		Description: jsii.String("skiff " + s.prefix + ": the GitHub App's private key as {\"<app id>\": \"<pem>\"} (the App ids are its keys). Written by the setup page; {} resets it."),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(32),
			ExcludePunctuation: jsii.Bool(true),
		},
	})
	s.SetupSecret = awssecretsmanager.NewSecret(s.Construct, jsii.String("SetupSecret"), &awssecretsmanager.SecretProps{
		Description: jsii.String("skiff " + s.prefix + ": the one-time secret of the setup page (SetupUrl output); replaced once the App is stored."),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(48),
			ExcludePunctuation: jsii.Bool(true),
		},
	})
	suppress(s.WebhookSecret, "AwsSolutions-SMG4", secretRotationReason)
	suppress(s.AppKeySecret, "AwsSolutions-SMG4", secretRotationReason)
	suppress(s.SetupSecret, "AwsSolutions-SMG4", "the setup secret is used once: the setup page replaces it with a random value when it stores the App")
}

// secretRotationReason justifies AwsSolutions-SMG4 on both secrets.
const secretRotationReason = "GitHub issues the App's private keys and holds its webhook secret: rotation is done in the App's settings by the operator " +
	"(the webhook accepts current and previous secrets during a rotation, docs/deploy.md); a rotation Lambda cannot create a GitHub App key"

// physicalName names a resource that must be known at synth time.
func (s *Skiff) physicalName(role string) string { return s.prefix + "-" + role }
