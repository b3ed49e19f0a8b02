package skiff

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
)

// stubTarget is an EventBridge target for the extension-point test: the
// scale-up function stands in for the EC2-event function to come.
func stubTarget(s *Skiff) awsevents.IRuleTarget {
	return awseventstargets.NewLambdaFunction(s.ScaleUp, nil)
}
