package registry

import "github.com/okd-project/scos-builder/builder"

// The engine's stage reporter plugs into Fetch unchanged.
var _ Reporter = builder.StageReporter(nil)
