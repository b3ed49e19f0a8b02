package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/jsii-runtime-go"
)

// EC2Rules are the EventBridge rules AddEC2Events creates.
type EC2Rules struct {
	// StateChange matches EC2 Instance State-change Notification events.
	StateChange awsevents.Rule
	// SpotInterruption matches EC2 Spot Instance Interruption Warning events.
	SpotInterruption awsevents.Rule
}

// AddEC2Events routes EC2 state changes that end a runner (shutting-down,
// terminated, stopping, stopped) and spot interruption warnings to target.
// New calls it once with the EC2-event function (functions/ec2events). The
// events carry no tags, so the target must ignore instances it does not
// know (the runner ledger has no record of them).
func (s *Skiff) AddEC2Events(target awsevents.IRuleTarget) EC2Rules {
	state := awsevents.NewRule(s.Construct, jsii.String("EC2StateChange"), &awsevents.RuleProps{
		Description: jsii.String("skiff " + s.prefix + ": EC2 instance state changes → runner ledger"),
		EventPattern: &awsevents.EventPattern{
			Source:     jsii.Strings("aws.ec2"),
			DetailType: jsii.Strings("EC2 Instance State-change Notification"),
			Detail:     &map[string]any{"state": []any{"shutting-down", "terminated", "stopping", "stopped"}},
		},
		Targets: &[]awsevents.IRuleTarget{target},
	})
	spot := awsevents.NewRule(s.Construct, jsii.String("EC2SpotInterruption"), &awsevents.RuleProps{
		Description: jsii.String("skiff " + s.prefix + ": spot interruption warnings → re-run on on-demand"),
		EventPattern: &awsevents.EventPattern{
			Source:     jsii.Strings("aws.ec2"),
			DetailType: jsii.Strings("EC2 Spot Instance Interruption Warning"),
		},
		Targets: &[]awsevents.IRuleTarget{target},
	})
	return EC2Rules{StateChange: state, SpotInterruption: spot}
}
