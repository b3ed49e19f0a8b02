package skiff

import (
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// suppress records a justified cdk-nag suppression on c and its children.
// Each call site says why the finding does not apply; appliesTo narrows an
// IAM5 suppression to the wildcard named ("Resource::…", "Action::…"), or a
// regular expression written /…/.
func suppress(c any, rule, reason string, appliesTo ...string) {
	sup := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		list := make([]any, len(appliesTo))
		for i, a := range appliesTo {
			if len(a) > 1 && a[0] == '/' {
				list[i] = &cdknag.RegexAppliesTo{Regex: jsii.String(a)}
			} else {
				list[i] = a
			}
		}
		sup.AppliesTo = &list
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{sup}, jsii.Bool(true))
}
