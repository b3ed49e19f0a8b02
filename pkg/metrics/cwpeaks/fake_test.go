package cwpeaks_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"

	"github.com/skiffci/skiff/pkg/metrics/cwpeaks"
)

// point is one sample of a series.
type point struct {
	at time.Time
	v  float64
}

// fakeCW is a CloudWatch GetMetricData fake over in-memory series, keyed by
// metric name and sorted dimensions. It checks the call's limits, pages its
// answers (pageQueries results per page), counts calls, and injects faults.
type fakeCW struct {
	mu     sync.Mutex
	series map[string][]point
	// nsOf is the namespace an instance's samples go to (put).
	nsOf        func(instanceID string) string
	calls       int
	pageQueries int                              // results per page; 0: all
	fault       func(call int) error             // an error for this call, or nil
	status      func(id string) types.StatusCode // a status for a result, or ""
	inputs      []*cloudwatch.GetMetricDataInput
}

func newFake() *fakeCW {
	return &fakeCW{series: map[string][]point{}, nsOf: func(string) string { return ns }}
}

func seriesKey(metric string, d []types.Dimension) string {
	var kv []string
	for _, x := range d {
		kv = append(kv, aws.ToString(x.Name)+"="+aws.ToString(x.Value))
	}
	slices.Sort(kv)
	return metric + "{" + strings.Join(kv, ",") + "}"
}

// put stores a sample in the namespace nsOf gives its instance (kv[1], the
// InstanceId dimension's value).
func (f *fakeCW) put(metric string, at time.Time, v float64, kv ...string) {
	f.putIn(f.nsOf(kv[1]), metric, at, v, kv...)
}

// putIn stores a sample in namespace ns.
func (f *fakeCW) putIn(ns, metric string, at time.Time, v float64, kv ...string) {
	var d []types.Dimension
	for i := 0; i < len(kv); i += 2 {
		d = append(d, types.Dimension{Name: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	k := ns + "|" + seriesKey(metric, d)
	f.series[k] = append(f.series[k], point{at, v})
}

func (f *fakeCW) GetMetricData(ctx context.Context, in *cloudwatch.GetMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.inputs = append(f.inputs, in)
	if f.fault != nil {
		if err := f.fault(f.calls); err != nil {
			return nil, err
		}
	}
	if len(in.MetricDataQueries) > cwpeaks.MaxQueries {
		return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: "too many queries"}
	}
	start := 0
	if in.NextToken != nil {
		start, _ = strconv.Atoi(*in.NextToken)
	}
	end := len(in.MetricDataQueries)
	if f.pageQueries > 0 && start+f.pageQueries < end {
		end = start + f.pageQueries
	}
	out := &cloudwatch.GetMetricDataOutput{}
	for _, q := range in.MetricDataQueries[start:end] {
		ms := q.MetricStat
		period := time.Duration(aws.ToInt32(ms.Period)) * time.Second
		buckets := map[time.Time][]float64{}
		for _, p := range f.series[aws.ToString(ms.Metric.Namespace)+"|"+seriesKey(aws.ToString(ms.Metric.MetricName), ms.Metric.Dimensions)] {
			if p.at.Before(*in.StartTime) || !p.at.Before(*in.EndTime) {
				continue
			}
			b := in.StartTime.Add(p.at.Sub(*in.StartTime) / period * period)
			buckets[b] = append(buckets[b], p.v)
		}
		res := types.MetricDataResult{Id: q.Id, StatusCode: types.StatusCodeComplete}
		var ts []time.Time
		for b := range buckets {
			ts = append(ts, b)
		}
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for _, b := range ts {
			vs := buckets[b]
			v := slices.Max(vs)
			if aws.ToString(ms.Stat) == "Average" {
				s := 0.0
				for _, x := range vs {
					s += x
				}
				v = s / float64(len(vs))
			}
			res.Timestamps = append(res.Timestamps, b)
			res.Values = append(res.Values, v)
		}
		if f.status != nil {
			if s := f.status(aws.ToString(q.Id)); s != "" {
				res.StatusCode = s
			}
		}
		out.MetricDataResults = append(out.MetricDataResults, res)
	}
	if end < len(in.MetricDataQueries) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

func throttling() error {
	return &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
}
