// kube-scheduler with scheduler-plugins' Coscheduling plugin and nothing else added: a peer
// of gang-scheduler in `make bench` (bench/run.py). Built by build.sh beside this file.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream registers them
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Decodes CoschedulingArgs (permitWaitingTimeSeconds, ...) in the scheduler configuration.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
