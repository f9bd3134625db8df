// Package e2e builds an e2e.test holding only Kubernetes' [sig-scheduling]
// specs (test/e2e/scheduling): the whole test/e2e package pulls in every
// SIG's specs and the cloud providers, which take far longer to build and
// are never run here. scripts/k8s-tools builds it with `go test -c`.
//
// Run it as the full suite is run:
//
//	e2e.test --kubeconfig=K --provider=skeleton --report-dir=DIR \
//	    --ginkgo.focus='\[sig-scheduling\] SchedulerPredicates'
package e2e

import (
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// The feature and label names the specs use, fixed before any spec is defined.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The specs.
	_ "k8s.io/kubernetes/test/e2e/scheduling"
	// What the full suite sets up in the framework: dumps on failure, node checks, gomega formatting.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	// Manifests and fixtures some specs read, from the files embedded in the binary.
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes [sig-scheduling] e2e suite", suiteConfig, reporterConfig)
}
